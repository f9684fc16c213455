"""Score runs in the background: queue one, start it in a worker, keep its heartbeat, and recover
the ones whose worker died (as the LM jobs are recovered: stall detection by beat, re-queue, resume).

- ``score_run_enqueue`` creates a pending run and sends its task, for a user who may start one
  (``scoring.add_scorerun`` and VIEW on the study; ``ScoreRunRefused`` otherwise, which the API
  answers 403 and the admin shows). A request joins a run already queued and not yet started
  only when that run acts for the same principal (the same requesting user, or the operator for
  the operator): it gets that run back instead of a second one (``ScoreRun.already_queued``; the
  callers say ``already_being_scored``), so repeated clicks queue one run. Anyone else's request
  gets a pending run of its own, which acts for them: a run is checked against its one requester
  (``requester_refusal``), so a request joined to another user's run would be lost when that
  user's share is revoked, their account deactivated or the study handed on. The later-asked run's
  results end up the study's latest (``score_run_store_lock``). A broker that cannot be
  reached fails the run at once with the reason and raises ``ScoringQueueUnavailable`` (the API
  answers 503, the admin says so): no run is left pending with nothing queued.
- ``score_run_start`` is the task's first step: it takes a pending run, or a running one whose
  heartbeat stopped (its worker was killed and the broker redelivered the message), and moves it to
  running. A running run with a live heartbeat belongs to another worker and is left alone.
- ``score_run_requester_check``: the requester is checked again where the results are written
  (``score.study_score``'s transaction), so a right lost while the run computed writes nothing.
- ``score_run_store_lock``: that transaction first locks the study's row and refuses a run that a
  run asked for after it has already finished (``ScoreRunSuperseded``), so the study's latest run
  (``selectors.score_run_latest``: by creation) is always the one whose unit scores are stored.
- ``heartbeat`` touches ``updated_at`` every ``RL_SCORE_HEARTBEAT_SECONDS`` while the run is
  computed, from a thread with its own connection.
- ``score_runs_resume_stalled`` (beat, every minute) moves running runs without a heartbeat for
  ``RL_SCORE_STALL_SECONDS`` back to pending and queues them again; after ``MAX_ATTEMPTS`` starts a
  run is failed instead (a study that kills its worker every time is not retried forever).
"""
from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lab.heartbeat import heartbeat as lab_heartbeat
from scoring.errors import ScoringError
from scoring.models import ScoreRun
from scoring.selectors import score_run_latest
from studies.models import Study
from studies.selectors import VIEW, study_user_may

logger = logging.getLogger(__name__)
Status = ScoreRun.Status
MAX_ATTEMPTS = 3
# The task that computes a run (``scoring.tasks.score_study_task`` is registered under this name) and
# its queue. Sent by name: the tasks call these services, so the services do not import the tasks.
SCORE_TASK = "scoring.tasks.score_study_task"
QUEUE = "default"
# Sending gives up after about a second when the broker does not answer (kombu's default retries
# for much longer, and the caller is a web request).
SEND_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}


# Starting a scoring run: this permission, and VIEW on the study (scoring recomputes; it changes no
# answer). README, "What sharing grants".
SCORE_PERMISSION = "scoring.add_scorerun"


class ScoringQueueUnavailable(ScoringError):
    """The task queue (broker) could not be reached; the run was marked failed."""


class ScoreRunRefused(ScoringError):
    """The acting user may not start a scoring run of this study; nothing was created or queued."""


class ScoreRunSuperseded(ScoringError):
    """A run of the same study asked for after this one finished first: this one writes nothing."""


def score_run_check(*, study: Study, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) a scoring run of ``study`` unless they
    hold ``scoring.add_scorerun`` and may VIEW the study, with ``ScoreRunRefused`` (the message does
    not name a study the user may not reach). :func:`score_run_enqueue` calls it, so the admin, the
    API and any task get one answer."""
    if user is None:
        return
    if not user.has_perm(SCORE_PERMISSION):
        raise ScoreRunRefused(f"you may not start scoring runs (it needs the permission {SCORE_PERMISSION}).")
    if not study_user_may(user=user, study=study, access=VIEW):
        raise ScoreRunRefused(f"study {study.pk}: not found or not yours to score (a study you own or that is "
                              "shared with you).")


def stalled_after() -> timedelta:
    return timedelta(seconds=float(settings.RL_SCORE_STALL_SECONDS))


def _send(run: ScoreRun) -> None:
    try:
        result = current_app.signature(SCORE_TASK, args=(run.study_id, run.pk)).apply_async(
            queue=QUEUE, retry_policy=SEND_RETRY_POLICY)
    except Exception as exc:  # kombu's OperationalError, a refused socket, DNS: nothing was queued
        reason = f"{exc.__class__.__name__}: {exc}"
        logger.warning("score run %s not queued: %s", run.pk, reason)
        with transaction.atomic():
            locked = ScoreRun.objects.select_for_update().get(pk=run.pk)
            if locked.status == Status.PENDING:
                ScoreRun.STATUS.move(locked, Status.FAILED, finished_at=timezone.now(),
                                     error=f"The task queue could not be reached; nothing was queued ({reason}).")
        raise ScoringQueueUnavailable(
            "The task queue (broker) cannot be reached, so the scoring was not queued; try again when it is "
            f"back ({reason})."
        ) from exc
    if result.id:
        ScoreRun.objects.filter(pk=run.pk).update(task_id=result.id)


def _study_lock(study_id: int) -> None:
    """Lock the study's row until the transaction ends: the one lock that orders the decisions on a
    study's runs (a run asked for, a run's results stored). ``FOR NO KEY UPDATE``: it does not wait
    for, nor hold up, the workers' claims, which read the row ``FOR KEY SHARE`` (a store may take
    seconds); a close (``FOR UPDATE``) still waits for it."""
    list(Study.objects.select_for_update(no_key=True).filter(pk=study_id).values_list("pk", flat=True))


def already_being_scored(run: ScoreRun) -> str:
    """What a caller tells the user whose request :func:`score_run_enqueue` answered with the run
    they (or, for the operator, the operator) already asked for, still pending (``run.already_queued``)."""
    return (f"Study {run.study} is already being scored (run {run.pk}, {run.get_status_display().lower()}); "
            "no second run was started. Its results will be the study's latest.")


def score_run_enqueue(*, study: Study, user) -> ScoreRun:
    """Create a pending ``ScoreRun`` and queue ``score_study_task`` for it once the row is committed
    (at once outside a transaction), for ``user`` (None: the operator), who must be allowed to
    (:func:`score_run_check`; ``ScoreRunRefused`` otherwise, before anything is created). Raises
    ``ScoringQueueUnavailable`` when the broker cannot be reached; the run is then failed with the
    reason, never left pending.

    A principal's request is not queued twice: under a lock of the study's row, a pending run of
    the study that acts for the same principal (requested by ``user``; for the operator, one of the
    operator's runs) is returned instead (the newest; ``already_queued`` set on it, False on a run
    made here), unless its requester may no longer score it (:func:`requester_refusal`: the run
    will fail) or it was last queued longer ago than ``RL_SCORE_STALL_SECONDS`` (asked for, or sent
    again by beat, :func:`score_runs_resume_stalled`, which touches it: older, its message may be lost
    and beat is not sending it again, so nothing else would ever start it). Another principal's pending run is
    never returned: a run is computed only if its own requester may still score the study when it
    starts and where it stores, so a request joined to it would vanish with a share revoked, an
    account deactivated or the study handed to another owner; this request gets its own run, whose
    results end up the study's latest, whichever finishes first (:func:`score_run_store_lock`). A
    running run is never returned either: it read the answers already, and a request made
    meanwhile asks for the answers since."""
    score_run_check(study=study, user=user)
    same_principal = {"by_operator": True} if user is None else {"by_operator": False, "requested_by_id": user.pk}
    with transaction.atomic():
        _study_lock(study.pk)
        for existing in (ScoreRun.objects.select_related("requested_by", "study")
                         .filter(study_id=study.pk, status=Status.PENDING, **same_principal,
                                 updated_at__gte=timezone.now() - stalled_after())
                         .order_by("-created_at", "-pk")):
            if not requester_refusal(existing):
                existing.already_queued = True
                return existing
        run = ScoreRun.objects.create(study=study, status=Status.PENDING, requested_by=user,
                                      by_operator=user is None)
        run.already_queued = False
        transaction.on_commit(lambda: _send(run))
    return run


def requester_refusal(run: ScoreRun) -> str:
    """Why ``run`` may not be computed now, empty when it may: the user who asked for it must
    still pass :func:`score_run_check` (a share revoked, the permission removed or the account
    deactivated since it was queued stops it); a run whose requester's account was deleted acts for
    nobody; the operator's runs always may. Pass a run read afresh (Django caches permissions on a
    user instance)."""
    if run.by_operator:
        return ""
    user = run.requested_by
    if user is None:
        return "Not scored: the account that asked for this run was deleted; nobody may act for it."
    if not user.is_active:
        return f"Not scored: {user}, who asked for this run, has a deactivated account."
    try:
        score_run_check(study=run.study, user=user)
    except ScoreRunRefused as exc:
        return f"Not scored: {user}, who asked for this run, may no longer score this study ({exc})"
    return ""


def score_run_requester_check(run: ScoreRun) -> None:
    """Call inside the transaction that writes ``run``'s results (``score.study_score``): the run
    is read again under a lock, with its requester, and :func:`requester_refusal` applied once
    more, as a run computes for up to an hour after :func:`score_run_start` checked (a share
    revoked, the permission removed or the account deactivated meanwhile). Refused: raises
    ``ScoreRunRefused`` with the reason, so that transaction writes nothing and the run is failed
    with it. The operator's runs pass without a read of the user."""
    fresh = (ScoreRun.objects.select_for_update(of=("self",)).select_related("requested_by", "study")
             .get(pk=run.pk))
    refusal = requester_refusal(fresh)
    if refusal:
        logger.warning("score run %s refused where it writes its results: %s", run.pk, refusal)
        raise ScoreRunRefused(refusal)


def score_run_store_lock(run: ScoreRun) -> None:
    """Call first inside the transaction that writes ``run``'s results (``score.study_score``): lock
    the study's row (so two runs of a study never store at once, nor a run is asked for meanwhile)
    and refuse ``run`` when a run of the study asked for after it is already done, with
    ``ScoreRunSuperseded``: that transaction then writes nothing and the run is failed with the
    reason. The study's latest run (``score_run_latest``, by creation) thus always holds its unit
    scores, whichever run's computation ended last."""
    _study_lock(run.study_id)
    latest = score_run_latest(study=run.study)
    if latest is not None and (latest.created_at, latest.pk) > (run.created_at, run.pk):
        logger.warning("score run %s superseded by run %s, asked for later and done first", run.pk, latest.pk)
        raise ScoreRunSuperseded(
            f"Superseded: run {latest.pk}, asked for after this one, finished first; its results are the study's "
            "latest, and this run stored nothing.")


def score_run_start(*, run_id: int, study_id: int, now: datetime | None = None, task_id: str = "") -> ScoreRun | None:
    """The task's claim on its run: a pending run, or a running one whose heartbeat is older than
    ``RL_SCORE_STALL_SECONDS`` (its worker died; this is the broker's redelivery), moves to running
    and is returned, once its requester is checked again (:func:`requester_refusal`; a refused run
    is failed with the reason). Anything else (done, failed, missing, or running under a live
    worker) returns None and the task does nothing."""
    now = now or timezone.now()
    with transaction.atomic():
        run = (ScoreRun.objects.select_for_update(of=("self",)).select_related("requested_by", "study")
               .filter(pk=run_id, study_id=study_id).first())
        if run is None:
            return None
        if run.status == Status.RUNNING:
            if run.updated_at > now - stalled_after():
                return None
            logger.warning("score run %s: taking over from a worker whose heartbeat stopped at %s", run.pk,
                           run.updated_at)
            ScoreRun.STATUS.move(run, Status.PENDING)
        if run.status != Status.PENDING:
            return None
        if run.attempts >= MAX_ATTEMPTS:
            ScoreRun.STATUS.move(run, Status.FAILED, finished_at=now, error=(
                f"The scoring worker died {run.attempts} times on this run (killed, out of memory?); "
                "not tried again. Score the study again once the cause is fixed."))
            return None
        refusal = requester_refusal(run)
        if refusal:
            logger.warning("score run %s refused: %s", run.pk, refusal)
            ScoreRun.STATUS.move(run, Status.FAILED, finished_at=now, error=refusal)
            return None
        # ``task_id``: the message that runs it, whose progress the run's page reads (beat may have
        # queued a pending run again: either message may be the one that runs it)
        ScoreRun.STATUS.move(run, Status.RUNNING, attempts=run.attempts + 1, error="",
                             **({"task_id": task_id[:100]} if task_id else {}))
        return run


def score_runs_resume_stalled(*, now: datetime | None = None, enqueue: bool = True) -> list[int]:
    """Beat, every minute: running runs whose heartbeat is older than ``RL_SCORE_STALL_SECONDS``
    lost their worker; they go back to pending and are queued again (the broker may never redeliver
    them: the filesystem broker does not, Redis only after its visibility timeout). So are pending
    runs no worker took within that time since they were queued (or queued again): their message
    may be lost (a process killed between this very move and its send, or between a request's
    commit and its send, a flushed broker), and nothing else would ever start them; a message
    queued twice is harmless, the second delivery finding the run running or done
    (``score_run_start``). A run that cannot be queued again (broker down) is failed with the
    reason. Returns the run ids."""
    now = now or timezone.now()
    moved = []
    with transaction.atomic():
        for run in ScoreRun.objects.select_for_update(skip_locked=True).filter(
            status__in=[Status.RUNNING, Status.PENDING], updated_at__lt=now - stalled_after()
        ):
            if run.status == Status.RUNNING:
                ScoreRun.STATUS.move(run, Status.PENDING)
            else:  # queued again now: not again before another stall period
                ScoreRun.objects.filter(pk=run.pk).update(updated_at=now)
            moved.append(run)
    if enqueue:
        for run in moved:
            with contextlib.suppress(ScoringQueueUnavailable):
                _send(run)
    return [run.pk for run in moved]


def heartbeat(run: ScoreRun, *, every: float | None = None) -> contextlib.AbstractContextManager[None]:
    """Touch the run's ``updated_at`` every ``every`` seconds (``RL_SCORE_HEARTBEAT_SECONDS``) while
    the body runs (``with heartbeat(run): ...``), from a thread with its own database connection
    (:func:`lab.heartbeat.heartbeat`). It only writes ``updated_at`` of a running run; a failed
    write is logged and retried at the next beat."""
    def touch() -> None:
        ScoreRun.objects.filter(pk=run.pk, status=Status.RUNNING).update(updated_at=timezone.now())

    return lab_heartbeat(touch, every=float(settings.RL_SCORE_HEARTBEAT_SECONDS if every is None else every),
                         name=f"score run {run.pk}")
