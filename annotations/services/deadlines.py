"""How long a task may take: the one owner of a task's deadlines, read by the release rules
(``release``: expiry, the first-answer window from consent), by publishing (the time limit each
platform is sent, ``platforms.publish.platform_time_limit``) and by the results (what expires a
task). Its own module, below both: publishing sits under ``release`` (release -> stopping ->
close -> publish), so it could not import the rule from there.

A study's two durations are fixed when it opens to workers (``opening.study_open``, which every
publish goes through before anything is sent): ``task_minutes_at_opening`` records them on the study
(``Study.assignment_minutes``, ``Study.first_answer_minutes``) from the rule as it reads then, and
from then on the study's tasks, its later publishes and its results read those, whatever
``RL_ASSIGNMENT_MINUTES`` and ``RL_FIRST_ANSWER_MINUTES`` become (a redeploy that changed them
would otherwise give its live tasks other deadlines than the platform was sent and its workers were
told). A draft follows the rule as it reads now, so its preview and cost estimate still work. No
query: the study row the caller holds carries them."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from studies.models import Study


def assignment_minutes_rule(study: Study) -> float:
    """The minutes a worker would have for one task of ``study`` if it opened now:
    ``RL_ASSIGNMENT_MINUTES`` if set, else four times the study's estimated minutes, at least 30."""
    minutes = settings.RL_ASSIGNMENT_MINUTES
    if not minutes:
        minutes = max(30.0, 4 * float(study.estimated_minutes_per_task))
    return float(minutes)


def first_answer_minutes_rule(study: Study) -> float:
    """The minutes a new task of ``study`` would wait for its first answer if it opened now:
    ``RL_FIRST_ANSWER_MINUTES`` if set, else the study's estimated minutes, at least 10; never
    more than ``assignment_minutes_rule``."""
    minutes = settings.RL_FIRST_ANSWER_MINUTES
    if not minutes:
        minutes = max(10.0, float(study.estimated_minutes_per_task))
    return min(float(minutes), assignment_minutes_rule(study))


def task_minutes_at_opening(study: Study) -> dict[str, float]:
    """The durations ``study`` fixes when it opens, from the rule as it reads now, as the fields
    ``opening.study_open`` writes with the move to open, on the row it locked:
    ``assignment_minutes`` (``assignment_minutes_rule``) and ``first_answer_minutes``
    (``first_answer_minutes_rule``). Whatever a copied design carried does not count."""
    return {"assignment_minutes": assignment_minutes_rule(study),
            "first_answer_minutes": first_answer_minutes_rule(study)}


def task_minutes_fixed(study: Study) -> bool:
    """Whether ``study``'s durations are the ones fixed when it opened (a study no longer a draft,
    with them recorded), not the rule as it reads now."""
    return study.status != Study.Status.DRAFT and study.assignment_minutes is not None


def assignment_duration(study: Study) -> timedelta:
    """Time a worker has for one task of ``study``: the minutes fixed when it opened
    (``Study.assignment_minutes``); for a draft (and a study opened before they were recorded that
    the migration could not reach, such as a preview's rolled-back opening or an imported outcome),
    the rule as it reads now: ``RL_ASSIGNMENT_MINUTES`` if set, else four times the study's
    estimated minutes, at least 30 minutes."""
    minutes = study.assignment_minutes if task_minutes_fixed(study) else assignment_minutes_rule(study)
    return timedelta(minutes=float(minutes))


def first_answer_window(study: Study) -> timedelta:
    """Time a new task of ``study`` waits for its first answer before its slots go back: the
    minutes fixed when it opened (``Study.first_answer_minutes``); for a draft, the rule as it
    reads now: ``RL_FIRST_ANSWER_MINUTES`` if set, else the study's estimated minutes per task and
    at least 10 minutes. Never longer than ``assignment_duration``."""
    fixed = task_minutes_fixed(study) and study.first_answer_minutes is not None
    minutes = study.first_answer_minutes if fixed else first_answer_minutes_rule(study)
    return min(timedelta(minutes=float(minutes)), assignment_duration(study))


# --- when a task's clock started ------------------------------------------------------------------
# A task's deadlines count from its start, ``Assignment.created_at``: the consent, for a task made
# there; for a platform arrival (MTurk, Prolific) the platform's own clock started when the worker
# accepted the task there, and the app's count starts as close to that as it can see: at the
# landing page the worker's consent form came from (the time its signed nonce carries:
# ``views.entry``), which is served at or after the accept. A platform assignment that had a task
# before (expired or returned since: the platform's clock did not restart) counts from that first
# task's start instead (``platform_clock_start``). A reload before any consent serves a new page, so
# a worker who reloads then is counted from the reload: the app then allows up to that much more than
# the platform.

def platform_clock_start(*, landed_at: datetime | None, first_started_at: datetime | None,
                         resumed_started_at: datetime | None = None) -> datetime | None:
    """When the app's clock of a platform arrival (MTurk, Prolific) runs from: its landing page's
    time (``landed_at``, from its signed nonce; None on a nonce made before it was), but never later
    than ``first_started_at``, the start of the first local task of the same platform assignment
    (``selectors.entry.platform_assignment_first_start``: one that expired or was returned, and the
    worker re-entered with the same assignment id). None when neither is known. The consent's check
    (``platform_time_run_out``) and the new task's deadlines (``task_clock_start``) both take it.
    ``resumed_started_at``: the start (``created_at``) of the task in progress that the consent will
    resume and move to a new platform assignment (the worker returned the place and accepted it
    again: ``services.entry.moved_task_started_at``). That task keeps its deadlines, which count
    from its start, so the check counts from there too, as its landing page's time does
    (``worker_pages.time_allowed`` of that task)."""
    if resumed_started_at is not None:
        return resumed_started_at
    known = [at for at in (landed_at, first_started_at) if at is not None]
    return min(known) if known else None


def task_clock_start(*, now: datetime, landed_at: datetime | None = None) -> datetime:
    """When the clock of a task started ``now`` runs from: ``landed_at`` (a platform arrival's
    landing time, from its signed nonce) if it is earlier, else ``now``."""
    return min(landed_at, now) if landed_at is not None else now


def full_deadline(study: Study, *, started_at: datetime) -> datetime:
    """The latest a task of ``study`` whose clock started at ``started_at`` may be finished."""
    return started_at + assignment_duration(study)


def first_answer_deadline(study: Study, *, started_at: datetime, consented_at: datetime) -> datetime:
    """When a task of ``study`` must have its first answer: ``first_answer_window`` from the
    consent, never past its ``full_deadline``."""
    return min(consented_at + first_answer_window(study), full_deadline(study, started_at=started_at))


def platform_time_run_out(study: Study, *, landed_at: datetime, now: datetime) -> bool:
    """Whether a platform arrival that landed at ``landed_at`` has too little time left ``now`` for
    a task: less than the study's estimated minutes per task before its full deadline from the
    landing (and the platform's own limit, ``PLATFORM_HANDOFF_SECONDS`` after it,
    ``platforms.publish.platform_time_limit``). A task started then would hold its units until it
    expired, its worker unable to finish in time, so the consent is refused. (At most half the
    task's time is asked for: a duration set below the estimate must not refuse every consent.)"""
    needed = min(timedelta(minutes=float(study.estimated_minutes_per_task)), assignment_duration(study) / 2)
    return now >= full_deadline(study, started_at=landed_at) - needed
