"""Block a worker: in the app for the researcher's own studies, or (superusers) everywhere and on
the MTurk account."""
from __future__ import annotations

from django.db import transaction

from annotations.models import Participant, WorkerBlock
from annotations.platforms import get_platform
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Platform, Study

from .access import BLOCK, PlatformAccessDenied, access_study
from .common import OP, actor, participant_pseudonym, participant_redaction


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
