"""Celery tasks of the crowd-platform part. Each takes ids, fetches, and calls one service; the
services are idempotent (request tokens and the PlatformCall audit rows), so ``acks_late`` and
retries never create a second HIT, payment or bonus.

Discovered through ``app.autodiscover_tasks(related_name="tasks_platforms")`` in config/celery.py.
"""
from __future__ import annotations

import logging
from decimal import Decimal

from celery import shared_task
from django.contrib.auth import get_user_model

from annotations.models import Assignment, Publication
from annotations.platforms.base import PlatformError, PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown, PlatformServiceError
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve
from annotations.services.platforms.sync import study_sync
from studies.models import Platform, Study

logger = logging.getLogger(__name__)

COMMON = {
    "acks_late": True,
    "autoretry_for": (PlatformTransientError, CallOutcomeUnknown),
    "retry_backoff": True,
    "retry_backoff_max": 600,
    "max_retries": 5,
    "soft_time_limit": 600,
    "time_limit": 660,
}
# One approve or bonus is one platform request (about 0.2-1 s); 50 a batch keeps a task well
# under the soft limit, and the rest is queued again.
BATCH_SIZE = 50


def _user(user_id):
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()


@shared_task(name="annotations.platforms.publish_study", **COMMON)
def publish_study_task(study_id: int, user_id: int | None = None, dry_run: bool = False,
                       platform: str | None = None) -> dict:
    study = Study.objects.get(pk=study_id)
    publication = study_publish(study=study, user=_user(user_id), dry_run=dry_run, platform_name=platform)
    return {"publication": publication.pk, "status": publication.status, "external_ids": publication.external_ids}


@shared_task(name="annotations.platforms.sync_study", **COMMON)
def sync_study_task(study_id: int) -> dict:
    study = Study.objects.get(pk=study_id)
    report = study_sync(study=study)
    return {"remote": report.remote, "matched": report.matched, "flagged": report.flagged,
            "status_updates": report.status_updates, "reconciled": report.reconciled}


@shared_task(name="annotations.platforms.sync_open_studies", **COMMON)
def sync_open_studies_task() -> dict:
    """Beat: sync every study with a live (or still publishing) platform publication."""
    study_ids = sorted(set(
        Publication.objects.filter(dry_run=False, status__in=[Publication.Status.PUBLISHED,
                                                              Publication.Status.PUBLISHING])
        .exclude(platform=Platform.LINK).values_list("study_id", flat=True)
    ))
    for study_id in study_ids:
        sync_study_task.delay(study_id)
    return {"queued": len(study_ids)}


@shared_task(name="annotations.platforms.approve_assignments", **COMMON)
def approve_assignments_task(assignment_ids: list[int], user_id: int | None = None) -> dict:
    batch, rest = assignment_ids[:BATCH_SIZE], assignment_ids[BATCH_SIZE:]
    approved, errors = 0, []
    for assignment in Assignment.objects.filter(pk__in=batch).order_by("id"):
        try:
            assignment_approve(assignment=assignment, user=_user(user_id))
            approved += 1
        except (PlatformServiceError, PlatformError) as exc:  # one bad row never stops the batch
            errors.append(f"assignment {assignment.pk}: {exc.message}")
    if rest:
        approve_assignments_task.delay(rest, user_id)
    return {"approved": approved, "errors": errors, "queued": len(rest)}


@shared_task(name="annotations.platforms.pay_bonuses", **COMMON)
def pay_bonuses_task(items: list[dict], user_id: int | None = None) -> dict:
    """``items``: [{"assignment_id": 1, "amount": "0.50", "reason": "...", "kind": "good_work"}]."""
    batch, rest = items[:BATCH_SIZE], items[BATCH_SIZE:]
    paid, errors = 0, []
    for item in batch:
        assignment = Assignment.objects.filter(pk=item["assignment_id"]).first()
        if assignment is None:
            errors.append(f"assignment {item['assignment_id']}: not found")
            continue
        try:
            bonus_pay(assignment=assignment, amount=Decimal(str(item["amount"])), reason=item["reason"],
                      kind=item.get("kind", "other"), user=_user(user_id))
            paid += 1
        except (PlatformServiceError, PlatformError) as exc:  # recorded on the bonus row; the rest proceeds
            errors.append(f"assignment {assignment.pk}: {exc.message}")
    if rest:
        pay_bonuses_task.delay(rest, user_id)
    return {"paid": paid, "errors": errors, "queued": len(rest)}
