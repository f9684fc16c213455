"""How long a task may take: the one owner of a task's deadlines, read by the release rules
(``release``: expiry, the first-answer window from consent), by publishing (the time limit each
platform is sent, ``platforms.publish.platform_time_limit``) and by the results (what expires a
task). Its own module, below both: publishing sits under ``release`` (release -> stopping ->
close -> publish), so it could not import the rule from there."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings

from studies.models import Study


def assignment_duration(study: Study) -> timedelta:
    """Time a worker has for one task: ``RL_ASSIGNMENT_MINUTES`` if set, else four times the
    study's estimated minutes, at least 30 minutes."""
    minutes = settings.RL_ASSIGNMENT_MINUTES
    if not minutes:
        minutes = max(30.0, 4 * float(study.estimated_minutes_per_task))
    return timedelta(minutes=float(minutes))


def first_answer_window(study: Study) -> timedelta:
    """Time a new task waits for its first answer before its slots go back:
    ``RL_FIRST_ANSWER_MINUTES`` if set, else the study's estimated minutes per task and at least
    10 minutes; never longer than ``assignment_duration``."""
    minutes = settings.RL_FIRST_ANSWER_MINUTES
    if not minutes:
        minutes = max(10.0, float(study.estimated_minutes_per_task))
    return min(timedelta(minutes=float(minutes)), assignment_duration(study))
