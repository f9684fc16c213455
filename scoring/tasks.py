"""Celery tasks of the scoring app: thin wrappers that take ids and call one service."""
from __future__ import annotations

from celery import current_task, shared_task

from scoring.services import study_score
from scoring.services.runs import SCORE_TASK, heartbeat, score_run_start, score_runs_resume_stalled
from studies.models import Study


# The queue is given where the task is sent (``score_run_enqueue`` uses ``apply_async(queue=QUEUE)``,
# ``scoring.services.runs.QUEUE``):
# Celery 5.5 deprecates the ``queue`` task attribute in favour of routing at send time.
@shared_task(name=SCORE_TASK, acks_late=True, reject_on_worker_lost=True, soft_time_limit=3600, time_limit=3660)
def score_study_task(study_id: int, run_id: int | None = None) -> int | None:
    """Score study ``study_id``, filling the pending ``ScoreRun`` ``run_id`` when given.

    Idempotent: a run that is done, failed, or running under a live worker (its heartbeat is
    fresh) is left alone, so a second delivery does not score twice; a running run whose heartbeat
    stopped (the worker was killed and the broker redelivered this message) is taken over
    (``scoring.services.runs.score_run_start``), which also checks again that the user who asked
    for the run may still score the study; ``study_score`` checks that once more where it writes
    the results (``runs.score_run_requester_check``), as a run may compute for up to an hour.
    Without ``run_id`` (nothing in the app sends that; only someone with the broker's access
    could) it scores as the operator. Returns the run id."""
    study = Study.objects.filter(pk=study_id).first()
    if study is None:
        return None
    if run_id is None:
        return study_score(study=study).pk
    run = score_run_start(run_id=run_id, study_id=study_id,
                          task_id=(current_task.request.id or "") if current_task else "")
    if run is None:
        return run_id
    with heartbeat(run):
        study_score(study=study, run=run)
    return run_id


@shared_task(name="scoring.resume_stalled_score_runs", acks_late=True, soft_time_limit=60, time_limit=90)
def resume_stalled_score_runs() -> list[int]:
    """Beat, every minute: queue again the runs whose worker died (no heartbeat)."""
    return score_runs_resume_stalled()
