"""Celery tasks of the questionnaire. Thin: each calls one idempotent service."""
from __future__ import annotations

from celery import shared_task

from annotations.services.release import assignment_expire_stale


@shared_task(
    name="annotations.expire_stale_assignments",
    acks_late=True,
    soft_time_limit=240,
    time_limit=300,
    max_retries=5,
    retry_backoff=True,
)
def expire_stale_assignments() -> int:
    """Expire active assignments past their deadline and give their units back (beat, every
    ``RL_EXPIRE_SECONDS``). Running it twice in a row changes nothing the second time."""
    return assignment_expire_stale()
