"""Queue scoring in the background."""
from __future__ import annotations

from django.db import transaction

from scoring.models import ScoreRun
from studies.models import Study


def score_run_enqueue(*, study: Study) -> ScoreRun:
    """Create a pending ``ScoreRun`` and queue ``score_study_task`` for it once the row is committed
    (the task fills that run; a second delivery finds it done and does nothing)."""
    from scoring.tasks import QUEUE, score_study_task

    with transaction.atomic():
        run = ScoreRun.objects.create(study=study, status=ScoreRun.Status.PENDING)

        def send() -> None:
            result = score_study_task.apply_async((study.pk, run.pk), queue=QUEUE)
            if result.id:
                ScoreRun.objects.filter(pk=run.pk).update(task_id=result.id)

        transaction.on_commit(send)
    return run
