"""How far a score run has got, for the run's state page.

Scoring writes nothing to the database until its last stage (one short transaction stores the
results), so its stages are told through the Celery task's own state in the result backend
(``PROGRESS``): ``score_stage`` is called by
the scoring pipeline as it reaches each stage, ``score_progress`` reads it for the state page.
Outside a Celery task (the management command) nothing is recorded; a result backend that cannot
store or answer costs only the progress line, never the scoring."""
from __future__ import annotations

import logging

from celery import current_task
from celery.result import AsyncResult

logger = logging.getLogger(__name__)

STAGES = (
    "reading the answers and their majorities",
    "Gen-U",
    "similarity to the gold rationale (BERTScore)",
    "shares, intervals and associations",
    "storing the unit scores",
)


def score_stage(name: str) -> None:
    """Record that the scoring task reached stage ``name`` (one of ``STAGES``)."""
    task = current_task
    task_id = getattr(getattr(task, "request", None), "id", None) if task else None
    if not task_id:
        return
    try:
        task.update_state(task_id=task_id, state="PROGRESS",
                          meta={"stage": name, "step": STAGES.index(name) + 1, "steps": len(STAGES)})
    except Exception:  # the result backend is down: scoring goes on without a progress line
        logger.warning("could not record scoring stage %r of task %s", name, task_id, exc_info=True)


def score_progress(task_id: str) -> dict | None:
    """``{"stage", "step", "steps"}`` of a running scoring task, or None when it told nothing."""
    if not task_id:
        return None
    try:
        result = AsyncResult(task_id)
        info = result.info if result.state == "PROGRESS" else None
    except Exception:  # no result backend, or it does not answer
        return None
    if not isinstance(info, dict) or info.get("stage") not in STAGES:
        return None
    return {"stage": info["stage"], "step": int(info.get("step", 0)), "steps": int(info.get("steps", len(STAGES)))}
