"""Celery tasks of the scoring app: thin wrappers that take ids and call one service."""
from __future__ import annotations

from celery import shared_task
from django.db import transaction

from scoring.models import ScoreRun
from scoring.services import study_score
from studies.models import Study

QUEUE = "default"


# The queue is given where the task is sent (``score_run_enqueue`` uses ``apply_async(queue=QUEUE)``):
# Celery 5.5 deprecates the ``queue`` task attribute in favour of routing at send time.
@shared_task(acks_late=True, soft_time_limit=3600, time_limit=3660)
def score_study_task(study_id: int, run_id: int | None = None) -> int | None:
    """Score study ``study_id``, filling the pending ``ScoreRun`` ``run_id`` when given.

    Idempotent: a run that is already done (or running under another worker) is left alone, so a
    redelivery after ``acks_late`` does not score twice. Returns the run id."""
    study = Study.objects.filter(pk=study_id).first()
    if study is None:
        return None
    run = None
    if run_id is not None:
        with transaction.atomic():
            run = ScoreRun.objects.select_for_update().filter(pk=run_id, study=study).first()
            if run is None or run.status in (ScoreRun.Status.DONE, ScoreRun.Status.RUNNING):
                return run_id
            run.status = ScoreRun.Status.RUNNING
            run.save(update_fields=["status"])
    run = study_score(study=study, run=run)
    return run.pk

