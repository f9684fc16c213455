"""Crowd platforms behind one interface (``base.CrowdProvider``): MTurk, Prolific, plain links.

``get_provider(name)`` builds the implementation a study uses. ``use_provider`` swaps in a
configured instance for a block of code (tests hand in an MTurk client wrapped by botocore's
Stubber, or a Prolific provider pointed at a local server)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .base import CrowdProvider

_overrides: dict[str, CrowdProvider] = {}


def get_provider(name: str) -> CrowdProvider:
    if name in _overrides:
        return _overrides[name]
    if name == "mturk":
        from .mturk import MTurkProvider

        return MTurkProvider()
    if name == "prolific":
        from .prolific import ProlificProvider

        return ProlificProvider()
    if name == "link":
        from .link import LinkProvider

        return LinkProvider()
    raise ValueError(f"unknown provider {name!r}: use one of link, prolific, mturk")


@contextlib.contextmanager
def use_provider(name: str, provider: CrowdProvider) -> Iterator[CrowdProvider]:
    previous = _overrides.get(name)
    _overrides[name] = provider
    try:
        yield provider
    finally:
        if previous is None:
            _overrides.pop(name, None)
        else:
            _overrides[name] = previous
