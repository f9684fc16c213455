"""Block a worker: in the app for the researcher's own studies, or (superusers) everywhere and on
the MTurk account."""
from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from annotations.models import Assignment, Participant, WorkerBlock
from annotations.platforms import get_platform
from annotations.selectors import blocks_covering, studies_covered_by
from annotations.selectors.review import study_tasks
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from annotations.services.release import assignments_end_in_progress
from studies.models import Platform, Study

from .access import BLOCK, PlatformAccessDenied, access_study
from .common import OP, actor, participant_pseudonym, participant_redaction


def worker_block(*, user, study: Study, participant: Participant, reason: str,
                 everywhere: bool = False) -> WorkerBlock:
    """Block a worker of ``study`` (one who took a task in it: ``selectors.review.study_tasks``, so
    not one who withdrew, whose only trace is an emptied task kept for payments), as ``user`` (PAY
    access).

    A block covers ``study`` and every study owned by ``user``, never another researcher's
    (``annotations.selectors.participant_blocked``); it lives in the app (the questionnaire
    refuses the worker there) and sends nothing to a platform, whose block would reach every
    researcher's studies on the shared account. ``everywhere`` (superusers only): the worker is
    blocked in every study and, on MTurk, on the account (``CreateWorkerBlock``). The worker's tasks
    in progress in the covered studies end (returned: ``_tasks_in_progress_end``), including one a start
    was making meanwhile: the block locks the worker's row (``FOR NO KEY UPDATE``, the lock a start takes
    first: ``selectors.participant_blocked``, ``lock``) before it writes, so it waits for that start's
    task and ends it. Idempotent."""
    study = access_study(user=user, study=study, access=BLOCK)
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("blocking a worker needs a reason (MTurk shows it to the worker)")
    if not study_tasks(study=study).filter(participant=participant).exists():
        if participant.assignments.filter(study=study).exists():  # only the emptied task kept for payments
            raise PlatformServiceError(f"worker {participant} withdrew from study {study.pk}: their data was "
                                       "erased, there is nothing of theirs here to block")
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
        # The worker's row first, as a start locks it (``participant_blocked``, ``lock``) before the
        # study and units: a start that read "not blocked" holds it until its task is committed, so
        # this block waits for it and then ends that task; a start after this one waits for the block.
        # Withdrawn meanwhile: the row is gone (a withdrawal deletes it once nothing names it), or
        # only the emptied task kept for payments is left.
        if (not list(Participant.objects.select_for_update(no_key=True).filter(pk=participant.pk).values_list("pk"))
                or not study_tasks(study=study).filter(participant=participant).exists()):
            raise PlatformServiceError(f"worker {participant} withdrew from study {study.pk}: their data was "
                                       "erased, there is nothing of theirs here to block")
        block = WorkerBlock.objects.filter(participant=participant, study=study, researcher=researcher,
                                           everywhere=everywhere).first()
        if block is None:
            block = WorkerBlock.objects.create(participant=participant, study=study, researcher=researcher,
                                               everywhere=everywhere, reason=reason)
        if everywhere:
            Participant.objects.filter(pk=participant.pk).update(blocked=True)
        _tasks_in_progress_end(block=block)
    participant.refresh_from_db()
    return block


def _tasks_in_progress_end(*, block: WorkerBlock) -> list[int]:
    """End the blocked worker's tasks in progress in the studies ``block`` covers (the rule of
    ``selectors.studies_covered_by``: its study, the studies its researcher owns, or every study), as
    returned: their unit slots go back and their answers never count, as a block refuses the
    worker in those studies (``assignment_start`` refuses a new task; this ends the ones they hold,
    which the task pages would otherwise go on taking). How they end: ``_blocked_tasks_end``. Call
    inside the block's transaction."""
    return _blocked_tasks_end(Q(studies_covered_by(block), participant_id=block.participant_id))


def blocks_end_tasks_in_study(*, study: Study) -> list[int]:
    """End the tasks in progress in ``study`` of the workers its blocks cover
    (``selectors.blocks_covering``, read with the study's owner as saved), as returned. A block ends the
    tasks in the studies it covers when it is made; a researcher's block covers the studies they own,
    so a study handed to them (``studies.services.studies.study_update``) comes under their earlier
    blocks then: this ends those workers' tasks there as the block would have (``_blocked_tasks_end``),
    where the answer and submit services, which check only that a task is active and within its
    deadline, would otherwise go on taking and counting them. Call inside the transaction that
    changed the owner, with the study row locked (received from ``studies.signals.study_owner_changed``)."""
    return _blocked_tasks_end(Q(study_id=study.pk), Exists(
        blocks_covering(study=study).filter(participant_id=OuterRef("participant_id"))))


def study_handed_over(sender, study: Study, **kwargs) -> None:
    """Receiver of ``studies.signals.study_owner_changed`` (``AnnotationsConfig.ready``)."""
    blocks_end_tasks_in_study(study=study)


def _blocked_tasks_end(*conditions: Q | Exists) -> list[int]:
    """End the tasks in progress that match ``conditions`` (those of blocked workers in the studies
    their blocks cover), as returned. The rows are locked in id order, so an answer being stored
    meanwhile either commits first (and is given back with its task) or waits and is refused
    (``lock_active``). The tasks are marked ``ended_by_researcher``: the worker did not leave them,
    and their page says the researcher ended them and asks them to return the task on their
    platform (``selectors.assignment_page``). A task already past its deadline had ended before the
    block: it ends expired, unmarked, as the expiry sweep would end it and as its page and the
    progress page already counted it (``release.assignments_end_in_progress``). Call inside a
    transaction."""
    rows = list(Assignment.objects.select_for_update(of=("self",)).filter(
        *conditions, status=Assignment.Status.ACTIVE)
        .order_by("pk").values_list("pk", "status", "expires_at"))
    return assignments_end_in_progress(rows, status=Assignment.Status.RETURNED, ended_by_researcher=True)
