"""A clock the tests move: ``django.utils.timezone.now`` (what the services and ``auto_now`` read)
under a test's control. The one copy: the cockpit's fixture and the deadline tests use it."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone


class Clock:
    def __init__(self, now: datetime | None = None):
        self.now = now or timezone.now()

    def __call__(self):
        return self.now

    def advance(self, minutes: float = 0, **delta) -> None:
        self.now += timedelta(minutes=minutes, **delta)


def clock_installed(monkeypatch, now: datetime | None = None) -> Clock:
    """A ``Clock`` starting at ``now`` (default: the real time) that ``timezone.now`` returns."""
    clock = Clock(now)
    monkeypatch.setattr(timezone, "now", clock)
    return clock
