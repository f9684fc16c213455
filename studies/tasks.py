"""Celery tasks of the studies app. LM work runs on the ``lm`` queue (GPU workers:
``celery -A config worker -Q lm --concurrency 1``); the model stays loaded in the worker process.
"""
from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from studies.lm.backends import TransientBackendError
from studies.services.generation import generation_jobs_resume_stalled
from studies.services.generation.jobs import generation_job_run_message
from studies.services.importers.jobs import IMPORT_TASK, import_job_run

logger = logging.getLogger(__name__)


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=2 * 3600,
    time_limit=2 * 3600 + 300,
)
def run_generation_job(job_id: int, chain: int | None = None) -> None:
    """Run one batch of a generation job, then queue the next one with the token the batch handed
    on (the job's ``chain``, advanced). A message whose token is no longer the job's (the job was
    queued again meanwhile, or this message is delivered again after its batch queued the next)
    does nothing; one without a token (queued before tokens existed) runs and makes its chain the job's
    (``generation_job_run_message``).

    One batch is ``job.batch_size`` items (16 by default): for a 3B model on one GPU about a
    minute, on a CPU a few minutes; a fine-tuning job is a single long batch. A worker killed
    mid-batch loses only that batch: acks_late redelivers the message and the batch restarts,
    skipping items already stored. Running a finished job again changes nothing.

    No Celery retries: the one retry layer is the OpenAI-compatible backend's own back-off per
    request (``studies.lm.backends.OpenAIBackend``). An endpoint still failing after it fails the
    job with the reason; "Resume job" continues where it stopped."""
    try:
        chain = generation_job_run_message(job_id=job_id, chain=chain)  # marks the job failed on any exception
    except TransientBackendError:
        return
    except Exception:
        logger.exception("generation job %s failed", job_id)
        raise
    if chain is not None:
        run_generation_job.apply_async(args=[job_id, chain], queue="lm")


@shared_task(name="studies.resume_stalled_generation_jobs", acks_late=True, soft_time_limit=60, time_limit=90)
def resume_stalled_generation_jobs() -> list[int]:
    """Beat, every minute: queue again the jobs whose message died with a killed worker."""
    return generation_jobs_resume_stalled(stalled_after=timedelta(seconds=settings.RL_LM_STALL_SECONDS))


@shared_task(name=IMPORT_TASK, acks_late=True, reject_on_worker_lost=True, soft_time_limit=3600,
             time_limit=3600 + 300)
def run_import_job(job_id: int) -> None:
    """Import one stored upload (``studies.services.importers.jobs.import_job_run``): one file, up
    to ``RL_IMPORT_MAX_ROWS`` records, validated then written in one transaction (a 100,000-row
    CSV: about a minute and some 200 MB). A worker killed mid-import wrote nothing; acks_late
    redelivers the message and the import starts again. A finished job is left as it is."""
    import_job_run(job_id=job_id)
