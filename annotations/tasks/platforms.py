"""Celery tasks of the crowd-platform part. Each takes ids, fetches, and calls one service; the
services are idempotent (request tokens and the PlatformCall audit rows), so ``acks_late`` and
retries never create a second HIT, payment or bonus.

Registered with the package (``annotations/tasks/__init__.py`` imports it), which
``app.autodiscover_tasks()`` finds like every app's ``tasks``.
"""
from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth import get_user_model

from annotations.models import PlatformCall, Publication
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms.bonus import study_bonuses_pay
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import study_approve_all
from annotations.services.platforms.sync import study_sync
from studies.models import Platform, Study

logger = logging.getLogger(__name__)

COMMON = {
    "acks_late": True,
    # Retried: a network error or a lost answer. The batch services finish every row first and
    # return those of unknown outcome; the money tasks then raise ``Unsettled`` (a
    # CallOutcomeUnknown) so the whole batch runs again, idempotently. A refusal (no right, an
    # assignment of another study, a bad amount) is a PlatformServiceError: never retried.
    "autoretry_for": (PlatformTransientError, CallOutcomeUnknown),
    "retry_backoff": True,
    "retry_backoff_max": 600,
    "max_retries": 5,
    "soft_time_limit": 600,
    "time_limit": 660,
}
# One approve or bonus is one platform request (about 0.2-1 s); 50 a batch keeps a task well
# under the soft limit. A long list is queued as one task per batch (``queue_in_batches``), each
# on its own: a retry runs its own batch again (idempotent: approved or paid rows send nothing)
# and queues nothing more.
BATCH_SIZE = 50


class Unsettled(CallOutcomeUnknown):
    """Some rows of a batch had no known outcome (a network error, an earlier attempt's lost
    answer): raised after the whole batch ran, so ``autoretry_for`` runs the batch again later."""


def _user(user_id):
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()


@shared_task(name="annotations.platforms.publish_study", **COMMON)
def publish_study_task(study_id: int, user_id: int | None = None, dry_run: bool = False) -> dict:
    """Publish study ``study_id`` on its platform as user ``user_id`` (``publish.study_publish``,
    which checks that the user may: PAY access; no user acts for nobody and is refused, never
    retried)."""
    study = Study.objects.get(pk=study_id)
    publication = study_publish(study=study, user=_user(user_id), dry_run=dry_run)
    return {"publication": publication.pk, "status": publication.status, "external_ids": publication.external_ids}


@shared_task(name="annotations.platforms.sync_study", **COMMON)
def sync_study_task(study_id: int) -> dict:
    study = Study.objects.get(pk=study_id)
    report = study_sync(study=study)
    return {"remote": report.remote, "matched": report.matched, "flagged": report.flagged,
            "status_updates": report.status_updates, "reconciled": report.reconciled}


@shared_task(name="annotations.platforms.sync_open_studies", **COMMON)
def sync_open_studies_task() -> dict:
    """Beat: sync every study with a live (or still publishing) platform publication, and every
    study, closed ones included, with a platform call whose answer was lost (a bonus, a review, a
    HIT made while the study closed): only a sync asks the platform what became of it."""
    live = (Publication.objects.filter(dry_run=False, status__in=[Publication.Status.PUBLISHED,
                                                                  Publication.Status.PUBLISHING])
            .exclude(platform=Platform.LINK).values_list("study_id", flat=True))
    unsettled = (PlatformCall.objects.filter(status=PlatformCall.Status.SENT, study__isnull=False)
                 .exclude(platform=Platform.LINK).values_list("study_id", flat=True))
    study_ids = sorted(set(live) | set(unsettled))
    for study_id in study_ids:
        sync_study_task.delay(study_id)
    return {"queued": len(study_ids)}


def queue_in_batches(task, *, study_id: int, user_id: int, assignment_ids: list[int], **kwargs) -> int:
    """Queue ``task`` once per ``BATCH_SIZE`` of ``assignment_ids``; returns how many tasks."""
    batches = [assignment_ids[i:i + BATCH_SIZE] for i in range(0, len(assignment_ids), BATCH_SIZE)]
    for batch in batches:
        task.delay(study_id=study_id, user_id=user_id, assignment_ids=batch, **kwargs)
    return len(batches)


def _settle(result: dict) -> dict:
    """``result`` of a batch service; ``Unsettled`` (a retry) if some rows' outcome is unknown."""
    if result["unsettled"]:
        raise Unsettled(f"{len(result['unsettled'])} row(s) without a known outcome: "
                        + "; ".join(result["errors"][:5]))
    return result


@shared_task(name="annotations.platforms.approve_assignments", **COMMON)
def approve_assignments_task(*, study_id: int, user_id: int, assignment_ids: list[int]) -> dict:
    """Approve ``assignment_ids`` of study ``study_id`` as user ``user_id``: the publish page's
    "Approve all" (``review.study_approve_all``, which checks the user's right and that every
    assignment is the study's)."""
    return _settle(study_approve_all(user=_user(user_id), study=study_id, assignment_ids=assignment_ids))


@shared_task(name="annotations.platforms.pay_bonuses", **COMMON)
def pay_bonuses_task(*, study_id: int, user_id: int, assignment_ids: list[int], amount: str, reason: str,
                     kind: str = "other") -> dict:
    """Pay the bonus ``amount`` (text, e.g. "0.50") with ``reason`` to ``assignment_ids`` of study
    ``study_id`` as user ``user_id`` (``bonus.study_bonuses_pay``, which checks the user's right
    and that every assignment is the study's)."""
    return _settle(study_bonuses_pay(user=_user(user_id), study=study_id, assignment_ids=assignment_ids,
                                     amount=amount, reason=reason, kind=kind))
