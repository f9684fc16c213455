"""Celery tasks of the questionnaire. Thin: each calls one idempotent service."""
from __future__ import annotations

import logging

from celery import shared_task

from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.sync import study_sync
from annotations.services.release import assignment_expire_stale
from annotations.services.stopping import (
    CLOSE_TASK,
    close_waits_for_listing,
    studies_all_decided,
    study_close_when_decided,
)
from studies.models import Study

logger = logging.getLogger(__name__)


# No retry options: beat runs this every ``RL_EXPIRE_SECONDS``, so a run that fails (a database
# restart) is simply done by the next one; retrying would only overlap the schedule. ``acks_late``
# keeps the message until the run finished, and the service is idempotent.
@shared_task(name="annotations.expire_stale_assignments", acks_late=True, soft_time_limit=240, time_limit=300)
def expire_stale_assignments() -> int:
    """Expire active assignments past their deadline and give their units back (beat, every
    ``RL_EXPIRE_SECONDS``). Running it twice in a row changes nothing the second time."""
    return assignment_expire_stale()


@shared_task(name=CLOSE_TASK, acks_late=True, soft_time_limit=240, time_limit=300)
def close_decided_study(study_id: int) -> bool:
    """Close a study that stops early once every unit is decided (queued when the last one is).
    Where the close waits for the platform's listing of the deciding work (Prolific:
    ``stopping.close_waits_for_listing``), the study is synced first, so work the platform lists as
    submitted closes it now rather than after beat's next sync. Idempotent: a closed study, or one with an
    undecided unit, is left alone."""
    study = Study.objects.filter(pk=study_id).first()
    if study is not None and close_waits_for_listing(study=study):
        study_sync(study=study)  # records its own errors; one that lists nothing leaves the close waiting
    return _close_decided(study_id)


# Beat's fallback for a close whose message was lost (the broker was down at the submit).
@shared_task(name="annotations.close_decided_studies", acks_late=True, soft_time_limit=240, time_limit=300)
def close_decided_studies() -> int:
    """Close every open study that stops early and whose units are all decided. Returns how many.
    One study's close failing in any way (logged) does not keep the others recruiting."""
    closed = 0
    for study_id in studies_all_decided():
        try:
            closed += _close_decided(study_id)
        except Exception:  # noqa: BLE001 - logged; the next study is closed all the same, this one next beat
            logger.exception("closing decided study %s failed", study_id)
    return closed


def _close_decided(study_id: int) -> bool:
    study = Study.objects.filter(pk=study_id).first()
    if study is None:
        return False
    try:
        return study_close_when_decided(study=study)
    except PlatformServiceError:  # refused (no right) or the platform failed: logged, beat tries again
        logger.warning("closing decided study %s failed", study_id, exc_info=True)
        return False
