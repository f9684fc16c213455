"""Stopping: close a study (the platform side too: HITs expired, the Prolific study stopped,
links closed), block a worker, notify workers."""
from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from annotations.models import Participant, Publication
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError
from annotations.services.links import links_close
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Platform, Study

from .common import OP, actor


def study_close(*, study: Study, user=None) -> list[Publication]:
    """The one way to close a study: stop recruiting on its platform (expire the HITs, stop the
    Prolific study, close the links), then move the study to closed through ``Study.STATUS``.
    Work already started can still be submitted and reviewed. Idempotent. Returns the
    publications it closed."""
    closed = []
    publications = Publication.objects.filter(study=study, dry_run=False, status__in=[
        Publication.Status.PUBLISHED, Publication.Status.PUBLISHING])
    for publication in publications:
        if publication.platform == Platform.LINK:
            links_close(study=study)
        else:
            platform = get_platform(publication.platform)
            operation = OP.EXPIRE_HIT if publication.platform == Platform.MTURK else OP.STOP_STUDY
            try:
                platform_call_execute(
                    spec=CallSpec(platform=publication.platform, operation=operation,
                                  idempotency_key=f"{publication.platform}:close:{publication.request_token}",
                                  request_summary={"external_ids": publication.external_ids},
                                  user=actor(user), study=study, publication=publication),
                    send=lambda p=publication, prov=platform: prov.close(external_ids=p.external_ids),
                    reconcile=lambda call: False,
                )
            except PlatformError as exc:
                raise PlatformServiceError(f"closing {publication} failed: {exc.message}") from exc
        with transaction.atomic():
            locked = Publication.objects.select_for_update().get(pk=publication.pk)
            Publication.STATUS.move(locked, Publication.Status.CLOSED, closed_at=timezone.now())
        closed.append(publication)
    with transaction.atomic():
        Study.STATUS.move(Study.objects.select_for_update().get(pk=study.pk), Study.Status.CLOSED)
    study.refresh_from_db(fields=["status", "updated_at"])  # the caller's instance is closed too
    return closed


def worker_block(*, participant: Participant, reason: str, user=None, study: Study | None = None) -> Participant:
    """Block a worker: in the app (the questionnaire refuses blocked participants) and on MTurk."""
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("blocking a worker needs a reason (MTurk shows it to the worker)")
    if participant.platform == Platform.MTURK:
        platform = get_platform(Platform.MTURK)
        platform_call_execute(
            spec=CallSpec(platform=Platform.MTURK, operation=OP.BLOCK,
                          idempotency_key=f"{Platform.MTURK}:block:{participant.external_id}",
                          request_summary={"worker_id": participant.external_id, "reason": reason[:500]},
                          user=actor(user), study=study),
            send=lambda: platform.block(worker_id=participant.external_id, reason=reason),
            reconcile=lambda call: False,
        )
    Participant.objects.filter(pk=participant.pk).update(blocked=True)
    participant.refresh_from_db()
    return participant


def workers_notify(*, study: Study, subject: str, message: str, user=None,
                   participants: list[Participant] | None = None) -> dict:
    """Message MTurk workers of ``study`` (all who worked on it, or ``participants``)."""
    if not subject.strip() or not message.strip():
        raise PlatformServiceError("a notification needs a subject and a message")
    if participants is None:
        participants = list(Participant.objects.filter(assignments__study=study, platform=Platform.MTURK).distinct())
    worker_ids = sorted({p.external_id for p in participants if p.platform == Platform.MTURK})
    if not worker_ids:
        return {"notified": 0}
    platform = get_platform(Platform.MTURK)
    digest = hashlib.sha256(f"{subject}|{message}|{','.join(worker_ids)}".encode()).hexdigest()[:24]
    call = platform_call_execute(
        spec=CallSpec(platform=Platform.MTURK, operation=OP.NOTIFY,
                      idempotency_key=f"{Platform.MTURK}:notify:{study.pk}:{digest}",
                      request_summary={"subject": subject[:200], "n_workers": len(worker_ids)},
                      user=actor(user), study=study),
        send=lambda: platform.notify(worker_ids=worker_ids, subject=subject, message=message),
        reconcile=lambda call: False,
    )
    return call.response
