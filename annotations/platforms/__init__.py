"""Crowd platforms behind one interface (``base.CrowdPlatform``): MTurk, Prolific, plain links.

``get_platform(name)`` builds the implementation a study uses. ``use_platform`` swaps in a
configured instance for a block of code (tests hand in an MTurk client wrapped by botocore's
Stubber, or a Prolific platform pointed at a local server)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .base import CrowdPlatform

_overrides: dict[str, CrowdPlatform] = {}


def get_platform(name: str) -> CrowdPlatform:
    if name in _overrides:
        return _overrides[name]
    if name == "mturk":
        from .mturk import MTurkPlatform

        return MTurkPlatform()
    if name == "prolific":
        from .prolific import ProlificPlatform

        return ProlificPlatform()
    if name == "link":
        from .link import LinkPlatform

        return LinkPlatform()
    raise ValueError(f"unknown platform {name!r}: use one of link, prolific, mturk")


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
