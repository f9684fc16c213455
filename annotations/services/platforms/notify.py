"""Message a study's MTurk workers (one audited, idempotent platform call)."""
from __future__ import annotations

import hashlib

from annotations.models import Participant
from annotations.platforms import get_platform
from annotations.selectors.review import study_participants
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Platform, Study

from .access import NOTIFY, access_study
from .common import OP, actor, participant_redaction


def workers_notify(*, user, study: Study, subject: str, message: str,
                   participants: list[Participant] | None = None) -> dict:
    """Message MTurk workers of ``study`` (all who worked on it, or those of ``participants`` who
    did), as ``user`` (PAY access). The study's workers are those every page and the API list
    (``selectors.review.study_participants``): a worker who withdrew is not messaged, though an
    emptied task of theirs stays for the payment audit."""
    study = access_study(user=user, study=study, access=NOTIFY)
    if not subject.strip() or not message.strip():
        raise PlatformServiceError("a notification needs a subject and a message")
    workers = study_participants(study=study).filter(platform=Platform.MTURK)
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
