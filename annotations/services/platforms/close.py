"""Stopping: close a study (the platform side too: HITs expired, the Prolific study stopped,
links closed), block a worker, notify workers."""
from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from annotations.models import Participant, Publication, WorkerBlock
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError
from annotations.services.links import links_close
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Platform, Study

from .access import BLOCK, CLOSE, NOTIFY, PlatformAccessDenied, access_study
from .common import OP, actor, participant_pseudonym, participant_redaction


def study_close(*, user, study: Study) -> list[Publication]:
    """The one way to close a study, as ``user`` (CHANGE access, ``access.access_study``): stop
    recruiting on its platform (expire the HITs, stop the Prolific study, close the links), then
    move the study to closed through ``Study.STATUS``. Work already started can still be
    submitted and reviewed. Idempotent. Returns the publications it closed."""
    caller, study = study, access_study(user=user, study=study, access=CLOSE)
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
    study.refresh_from_db(fields=["status", "updated_at"])
    if isinstance(caller, Study):
        caller.refresh_from_db(fields=["status", "updated_at"])  # the caller's instance is closed too
    return closed


def worker_block(*, user, study: Study, participant: Participant, reason: str,
                 everywhere: bool = False) -> WorkerBlock:
    """Block a worker of ``study`` (one who took a task in it), as ``user`` (PAY access).

    A block covers ``study`` and every study owned by ``user``, never another researcher's
    (``annotations.selectors.participant_blocked``); it lives in the app (the questionnaire
    refuses the worker there) and sends nothing to a platform, whose block would reach every
    researcher's studies on the shared account. ``everywhere`` (superusers only): the worker is
    blocked in every study and, on MTurk, on the account (``CreateWorkerBlock``). Idempotent."""
    study = access_study(user=user, study=study, access=BLOCK)
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("blocking a worker needs a reason (MTurk shows it to the worker)")
    if not participant.assignments.filter(study=study).exists():
        raise PlatformServiceError(f"worker {participant}: not found in study {study.pk}")
    if everywhere and not getattr(user, "is_superuser", False):
        raise PlatformAccessDenied("only a superuser blocks a worker in every researcher's studies; your block "
                                   "covers your own studies")
    researcher = actor(user)
    if everywhere and participant.platform == Platform.MTURK:
        platform = get_platform(Platform.MTURK)
        # The key names the worker by pseudonym: the audit list is read by researchers who may
        # not see raw worker ids (studies.view_raw_worker_ids).
        platform_call_execute(
            spec=CallSpec(platform=Platform.MTURK, operation=OP.BLOCK,
                          idempotency_key=f"{Platform.MTURK}:block:{participant_pseudonym(participant)}",
                          request_summary={"worker": participant_pseudonym(participant), "reason": reason[:500]},
                          user=researcher, study=study, redact=participant_redaction(participant)),
            send=lambda: platform.block(worker_id=participant.external_id, reason=reason),
            reconcile=lambda call: False,
        )
    with transaction.atomic():
        block = WorkerBlock.objects.filter(participant=participant, study=study, researcher=researcher,
                                           everywhere=everywhere).first()
        if block is None:
            block = WorkerBlock.objects.create(participant=participant, study=study, researcher=researcher,
                                               everywhere=everywhere, reason=reason)
        if everywhere:
            Participant.objects.filter(pk=participant.pk).update(blocked=True)
    participant.refresh_from_db()
    return block


def workers_notify(*, user, study: Study, subject: str, message: str,
                   participants: list[Participant] | None = None) -> dict:
    """Message MTurk workers of ``study`` (all who worked on it, or those of ``participants`` who
    did), as ``user`` (PAY access)."""
    study = access_study(user=user, study=study, access=NOTIFY)
    if not subject.strip() or not message.strip():
        raise PlatformServiceError("a notification needs a subject and a message")
    workers = Participant.objects.filter(assignments__study=study, platform=Platform.MTURK).distinct()
    if participants is not None:
        workers = workers.filter(pk__in=[p.pk for p in participants])
    participants = list(workers)
    worker_ids = sorted({p.external_id for p in participants if p.platform == Platform.MTURK})
    if not worker_ids:
        return {"notified": 0}
    platform = get_platform(Platform.MTURK)
    digest = hashlib.sha256(f"{subject}|{message}|{','.join(worker_ids)}".encode()).hexdigest()[:24]
    call = platform_call_execute(
        spec=CallSpec(platform=Platform.MTURK, operation=OP.NOTIFY,
                      idempotency_key=f"{Platform.MTURK}:notify:{study.pk}:{digest}",
                      request_summary={"subject": subject[:200], "n_workers": len(worker_ids)},
                      user=actor(user), study=study,
                      redact={k: v for p in participants for k, v in participant_redaction(p).items()}),
        send=lambda: platform.notify(worker_ids=worker_ids, subject=subject, message=message),
        reconcile=lambda call: False,
    )
    return call.response
