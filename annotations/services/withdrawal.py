"""A participant's withdrawal from a study, honoured everywhere (issue 24).

Ethics protocols and Prolific's terms let a participant withdraw and have their data deleted.
``participant_withdraw`` does it in one transaction, as a researcher with change rights on the
study (``access.access_study``, ``CHANGE``):

- their tasks end as ``withdrawn`` and their unit slots go back by the release rules
  (``release.assignments_withdraw``): units return to the pool while the study is open, and
  ``claims_that_count``, the counters, the scores, the progress page and the exports follow;
- their answers (with their timings and flags, and the flags' reviews), their claims, their
  qualification answers, consent receipts, platform bindings and the platform's submission rows
  (raw worker ids) are deleted; their single-person links are revoked and unlinked;
- a task that money was paid or recorded for (a ``Bonus`` or a ``PlatformCall`` names it) stays as
  an empty ``withdrawn`` task with its platform references, token and times cleared, so the audit
  rows keep pointing at what they paid for; every other task is deleted. Payment rows are not
  touched: their amounts stay, and they name workers by pseudonym and platform assignment ids
  only (``platforms.common.participant_pseudonym``);
- a task still submitted and not reviewed whose platform holds a submission for it (MTurk
  assignment, Prolific session) refuses the withdrawal (``WithdrawalError`` naming the tasks;
  nothing changes): that submission waits for the researcher's decision, which the app could no
  longer send once the task is erased (and sync skips a withdrawn worker), so the worker would go
  unpaid without anyone being told. Approve or reject those tasks, then withdraw. Work with no
  platform submission (participant links) has no decision to send and is erased as before;
- a ``Withdrawal`` records who withdrew them and when, under a one-way digest
  (``lab.pseudonyms.withdrawal_digest``), never the pseudonym or platform id: a later sync skips
  the platform's rows of that worker and the worker gets no task in the study again.

The ``Participant`` row itself stays: it is shared with the worker's other studies, and payment
rows (``Bonus.participant``) must keep naming whom they paid. Withdrawing twice changes nothing
the second time (the record's counts do not move)."""
from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from annotations.models import (
    Annotation,
    Assignment,
    Bonus,
    Claim,
    ConsentReceipt,
    Participant,
    ParticipantLink,
    PlatformAssignmentBinding,
    PlatformCall,
    PlatformSubmission,
    QualificationGrant,
    Withdrawal,
)
from annotations.models.core import new_token
from annotations.selectors import claims_that_count, participant_withdrawal_digest
from annotations.services.errors import AnnotationError
from annotations.services.participants import IDENTIFIER_PREFIX, identifier_hash
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import CHANGE, access_study
from annotations.services.platforms.common import actor
from annotations.services.release import assignments_withdraw
from lab.pseudonyms import ids_matching_pseudonyms, withdrawal_digest
from studies.models import Platform, Study

WITHDRAW = CHANGE  # withdrawing a participant changes the study's data: change rights on it


class WithdrawalError(PlatformServiceError):
    """The withdrawal cannot be done as asked (nobody given, or nobody found); nothing changed."""


class ParticipantNotFound(WithdrawalError):
    """Nobody matching took part in the study, and nobody matching was withdrawn from it."""


@dataclass
class WithdrawalOutcome:
    """What one call did: the audit record, and whether this call erased anything."""

    withdrawal: Withdrawal
    created: bool
    answers_erased: int
    tasks_ended: int


def _participants(study: Study, *, pseudonym: str, worker_id: str, identifier: str) -> list[Participant]:
    """The study's participants named by exactly one of the three ways (their tasks in ``study``)."""
    given = [name for name, value in (("pseudonym", pseudonym), ("worker_id", worker_id),
                                      ("participant_identifier", identifier)) if (value or "").strip()]
    if len(given) != 1:
        raise WithdrawalError(
            "name the participant one way: their pseudonym (w_...), their platform worker id, or the "
            f"participant identifier they typed{' (not ' + ' and '.join(given) + ')' if given else ''}")
    in_study = Participant.objects.filter(pk__in=Assignment.objects.filter(study=study).values("participant_id"))
    if pseudonym.strip():
        ids = ids_matching_pseudonyms([pseudonym], in_study.values_list("pk", "platform", "external_id")
                                      .iterator(chunk_size=2000))
        return list(Participant.objects.filter(pk__in=ids).order_by("id"))
    if worker_id.strip():
        return list(in_study.filter(external_id=worker_id.strip()).order_by("id"))
    try:
        hashed = IDENTIFIER_PREFIX + identifier_hash(identifier)
    except AnnotationError as exc:
        raise WithdrawalError(exc.message) from exc
    return list(in_study.filter(platform=Platform.LINK, external_id=hashed).order_by("id"))


def _digests_of_absent(study: Study, *, pseudonym: str, worker_id: str, identifier: str) -> list[str]:
    """The digests a participant no longer in the study would have been withdrawn under."""
    if pseudonym.strip():
        return [withdrawal_digest(study.pk, pseudonym)]
    if worker_id.strip():
        return [participant_withdrawal_digest(platform=p, external_id=worker_id.strip(), study=study)
                for p in Platform.values]
    return [participant_withdrawal_digest(platform=Platform.LINK, study=study,
                                          external_id=IDENTIFIER_PREFIX + identifier_hash(identifier))]


def _erase(study: Study, participant: Participant) -> tuple[int, int, int]:
    """Erase ``participant``'s data from ``study`` (rows locked by the caller's transaction).
    Returns (answers erased, of which counted, tasks ended or emptied)."""
    task_ids = list(Assignment.objects.filter(study=study, participant=participant).order_by("id")
                    .values_list("id", flat=True))
    n_tasks = Assignment.objects.filter(pk__in=task_ids).exclude(status=Assignment.Status.WITHDRAWN).count()
    answers = Annotation.objects.filter(claim__assignment_id__in=task_ids)
    n_counted = answers.filter(claim__in=claims_that_count(study=study)).count()
    n_answers = answers.count()
    # First the slots, by the release rules (what counted leaves the counters), then the data.
    assignments_withdraw(assignment_ids=task_ids)
    Claim.objects.filter(assignment_id__in=task_ids).delete()  # their answers, timings, flag reviews
    # The platform's rows: theirs go; a hold on someone else's task that names their id keeps the
    # hold (that work stays out) but not their id.
    PlatformSubmission.objects.filter(publication__study=study).filter(
        Q(assignment_id__in=task_ids) | Q(worker_id=participant.external_id, assignment__isnull=True)).delete()
    PlatformSubmission.objects.filter(publication__study=study, worker_id=participant.external_id).update(worker_id="")
    QualificationGrant.objects.filter(study=study, participant=participant).delete()
    ConsentReceipt.objects.filter(study=study, participant=participant).delete()
    PlatformAssignmentBinding.objects.filter(study=study, participant=participant).delete()
    ParticipantLink.objects.filter(study=study, participant=participant).update(
        participant=None, redeemed_at=None, revoked=True)
    paid_for = Assignment.objects.filter(pk__in=task_ids).filter(
        Exists(Bonus.objects.filter(assignment_id=OuterRef("pk")))
        | Exists(PlatformCall.objects.filter(assignment_id=OuterRef("pk"))))
    kept = list(paid_for.values_list("id", flat=True))
    for pk in kept:  # each its own token: the worker's old page link opens nothing
        Assignment.objects.filter(pk=pk).update(
            token=new_token(), platform_assignment_id="", platform_task_id="", return_url="", completion_code="",
            consented_at=None, submitted_at=None, reviewed_at=None, participant_link=None,
            qualification_pending=False)
    Assignment.objects.filter(pk__in=task_ids).exclude(pk__in=kept).delete()
    return n_answers, n_counted, n_tasks


def _refuse_while_unreviewed(study: Study, participants: list[Participant]) -> None:
    """Raise ``WithdrawalError`` naming ``participants``' tasks in ``study`` that are submitted and not
    reviewed and that a platform holds a submission for (locked, so an approval or rejection running
    meanwhile either commits first or waits): the worker is owed a decision on them, which a
    withdrawal would make impossible to send."""
    waiting = list(Assignment.objects.select_for_update().filter(
        study=study, participant__in=participants, status=Assignment.Status.SUBMITTED)
        .exclude(platform_assignment_id="").order_by("pk").values_list("pk", flat=True))
    if waiting:
        raise WithdrawalError(
            f"task(s) {', '.join(map(str, waiting))} of this participant are submitted and not reviewed: approve or "
            "reject these first (the worker is owed a decision), then withdraw. Nothing was changed.")


def participant_withdraw(*, user, study: Study | int, pseudonym: str = "", worker_id: str = "",
                         participant_identifier: str = "") -> WithdrawalOutcome:
    """Withdraw a participant from ``study`` as ``user`` (change rights on the study: refused with
    ``PlatformAccessDenied`` otherwise), naming them by exactly one of their pseudonym, their
    platform worker id, or the participant identifier they typed. Erases their data from the study
    and records the withdrawal (see the module's docstring), all in one transaction. Idempotent:
    withdrawing someone already withdrawn returns their record (``created`` False) and changes
    nothing. ``WithdrawalError`` naming the tasks, before anything changes, while a task of theirs
    in the study is submitted on a platform and not reviewed (``_refuse_while_unreviewed``).
    ``ParticipantNotFound`` when nobody matching took part in the study or was withdrawn from it; ``WithdrawalError`` for a request that names nobody or two ways at once."""
    study = access_study(user=user, study=study, access=WITHDRAW)
    with transaction.atomic():
        participants = _participants(study, pseudonym=pseudonym, worker_id=worker_id, identifier=participant_identifier)
        if not participants:
            digests = _digests_of_absent(study, pseudonym=pseudonym, worker_id=worker_id,
                                         identifier=participant_identifier)
            existing = Withdrawal.objects.filter(study=study, digest__in=digests).order_by("id").first()
            if existing is None:
                raise ParticipantNotFound(f"nobody matching took part in study {study.pk}, and nobody matching was "
                                          "withdrawn from it: check the pseudonym or id")
            return WithdrawalOutcome(withdrawal=existing, created=False, answers_erased=0, tasks_ended=0)
        for participant in participants:
            list(Participant.objects.select_for_update().filter(pk=participant.pk).values_list("pk"))
        _refuse_while_unreviewed(study, participants)
        outcome = None
        for participant in participants:  # one person; two only when one id exists on two platforms
            digest = participant_withdrawal_digest(platform=participant.platform, external_id=participant.external_id,
                                                   study=study)
            record, created = Withdrawal.objects.select_for_update().get_or_create(
                study=study, digest=digest, defaults={"withdrawn_by": actor(user)})
            n_answers, n_counted, n_tasks = _erase(study, participant)
            if n_answers or n_tasks:
                Withdrawal.objects.filter(pk=record.pk).update(
                    n_answers=record.n_answers + n_answers, n_counted_answers=record.n_counted_answers + n_counted,
                    n_tasks=record.n_tasks + n_tasks)
                record.refresh_from_db()
            outcome = outcome or WithdrawalOutcome(withdrawal=record, created=created, answers_erased=n_answers,
                                                   tasks_ended=n_tasks)
        return outcome
