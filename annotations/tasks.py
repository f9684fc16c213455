"""Celery tasks of the questionnaire. Thin: each calls one idempotent service."""
from __future__ import annotations

from celery import shared_task

from annotations.services.release import assignment_expire_stale


# No retry options: beat runs this every ``RL_EXPIRE_SECONDS``, so a run that fails (a database
# restart) is simply done by the next one; retrying would only overlap the schedule. ``acks_late``
# keeps the message until the run finished, and the service is idempotent.
@shared_task(name="annotations.expire_stale_assignments", acks_late=True, soft_time_limit=240, time_limit=300)
def expire_stale_assignments() -> int:
    """Expire active assignments past their deadline and give their units back (beat, every
    ``RL_EXPIRE_SECONDS``). Running it twice in a row changes nothing the second time."""
    return assignment_expire_stale()
