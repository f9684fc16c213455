"""Crowd platforms behind one interface (``base.CrowdPlatform``): MTurk, Prolific, plain links.

``get_platform(name)`` builds the implementation a study uses. ``use_platform`` swaps in a
configured instance for a block of code (tests hand in an MTurk client wrapped by botocore's
Stubber, or a Prolific platform pointed at a local server)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from studies.models import Platform

from .base import CrowdPlatform
from .link import LinkPlatform
from .mturk import MTurkPlatform
from .prolific import ProlificPlatform

_overrides: dict[str, CrowdPlatform] = {}


def platform_class(name: str) -> type[CrowdPlatform]:
    """The implementation of the platform called ``name`` (a ``studies.models.Platform`` value)."""
    for cls in (LinkPlatform, ProlificPlatform, MTurkPlatform):
        if cls.name == name:
            return cls
    raise ValueError(f"unknown platform {name!r}: use one of {', '.join(Platform.values)}")


def get_platform(name: str) -> CrowdPlatform:
    if name in _overrides:
        return _overrides[name]
    return platform_class(name)()


@contextlib.contextmanager
def use_platform(name: str, platform: CrowdPlatform) -> Iterator[CrowdPlatform]:
    previous = _overrides.get(name)
    _overrides[name] = platform
    try:
        yield platform
    finally:
        if previous is None:
            _overrides.pop(name, None)
        else:
            _overrides[name] = previous
