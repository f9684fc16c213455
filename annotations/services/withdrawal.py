"""A participant's withdrawal from a study, honoured everywhere (issue 24).

Ethics protocols and Prolific's terms let a participant withdraw and have their data deleted.
``participant_withdraw`` does it in one transaction, as a researcher with change rights on the
study (``access.access_study``, ``CHANGE``):

- their tasks end as ``withdrawn`` and their unit slots go back by the release rules
  (``release.assignments_withdraw``): units return to the pool while the study is open, and
  ``claims_that_count``, the counters, the scores, the progress page and the exports follow;
- their answers (with their timings and flags, and the flags' reviews), their claims, their
  qualification answers, consent receipts, platform bindings and the platform's submission rows
  (raw worker ids) are deleted; their single-person links are revoked and unlinked; a researcher's
  block of them made on the study stays (it also covers the researcher's other studies), its reason,
  which says something of them, replaced by ``BLOCK_REASON_ERASED`` (the audit rows of calls sent to
  a platform keep what was sent, by pseudonym: a rejection's feedback, an MTurk block's reason); a
  worker who consented but got no task (the start refused: no work left) is found by their consent
  receipt, platform binding or qualification answers, and those are erased;
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
- so does work the platform lists as submitted while its task here is active, returned or expired
  (Prolific's AWAITING REVIEW, an MTurk assignment posted to externalSubmit by hand: sync holds it,
  ``NOT_SUBMITTED_HERE`` or ``NO_ANSWERS``) that nobody decided yet, by the rule of the worker's page
  (``review.submitted_not_here_to_decide``): erasing the task deletes the platform's row, and the
  decision could no longer be sent either. Reject it, or clear its hold and approve it, on the
  worker's page, then withdraw. Work decided on the platform itself (its auto-approval) does not
  refuse;
- so does a ``Bonus`` on a task of theirs that is not settled (pending, failed, outcome unknown:
  anything but paid or recorded, ``bonus.SETTLED``) and can still be paid (its task is submitted
  or approved, held or not, and no later bonus of the task, kind and reason replaced a failed one):
  a withdrawn task takes no bonus, so the money could never be paid afterwards and nobody would be
  told. The refusal names each task, amount and status; pay it again (an unknown one after a sync;
  a held task's once its hold is cleared), then withdraw. A bonus that could never be paid here (its
  task rejected, say) does not refuse: nothing could lift the refusal, so it would hold the erasure
  hostage;
- a worker the study knows only from its platform's rows (sync stored their raw id for work with
  no task here, ``NO_LOCAL_ASSIGNMENT``, or for a session someone else's task answered,
  ``WORKER_MISMATCH``) is found by platform id or pseudonym there too: those rows lose their id
  (deleted, or blanked where they hold another participant's task, whose hold stays) and the
  withdrawal is recorded; a held task waiting for its decision refuses it first, as above
  (``_platform_only_withdraw``);
- a ``Withdrawal`` records who withdrew them and when, under a one-way digest
  (``lab.pseudonyms.withdrawal_digest``), never the pseudonym or platform id: a later sync skips
  the platform's rows of that worker and the worker gets no task in the study again. A sync running
  meanwhile stores none either: the withdrawal holds the study's ``WITHDRAWAL_LOCK`` alone, and each
  row's store takes it shared and reads the withdrawals again (``sync._submission_store``).

An MTurk or Prolific worker's ``Participant`` row, which holds their raw platform id, goes too once
nothing names it (a link participant's stays: their browser's cookie names it): it stays
while it is shared with the worker's other studies, while a payment row (``Bonus.participant``, a
task kept because it was paid for) must keep naming whom it paid, and while a block names it
(``Participant.blocked``, ``WorkerBlock``) (``_participant_forget``). Withdrawing twice changes
nothing the second time (the record's counts do not move): the record is found by its digest, which
needs no row of the worker.

Copies made from the study's bundle on this installation (``bundle.bundle_import``: an
``ImportRecord`` of kind ``bundle`` whose summary names the study as ``original_study`` and the
copy as ``study``) hold the worker as their own participant, ``imported_worker_id(copy, pseudonym)``:

- in a copy, the worker is also found by the pseudonym the original's exports show, by their platform
  id or by the identifier they typed (each turned into that pseudonym as the exports do), so a
  researcher honours a request there with what the request names;
- withdrawing from a study withdraws the worker from each copy that still holds a task of theirs
  and that the acting user may change, by this same service (its rights check beside its write,
  and so on to copies of that copy); a copy the user may not change is left as it is and counted
  (``WithdrawalOutcome.copies_not_changeable``, a count, no names: its owner withdraws there by the
  pseudonym). A copy is reached again by a later run (e.g. one imported from a bundle made before
  the withdrawal); one already withdrawn holds no task and is not touched."""
from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from annotations.models import (
    WITHDRAWAL_LOCK,
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
    WorkerBlock,
)
from annotations.models.core import new_token
from annotations.selectors import claims_that_count, participant_withdrawal_digest
from annotations.selectors.platforms import assignments_bonusable
from annotations.services.errors import AnnotationError
from annotations.services.participants import IDENTIFIER_PREFIX, identifier_hash, imported_worker_id
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import CHANGE, PlatformAccessDenied, access_study, bundle_copy_ids
from annotations.services.platforms.bonus import SETTLED
from annotations.services.platforms.common import actor
from annotations.services.platforms.review import submitted_not_here_to_decide
from annotations.services.release import assignments_withdraw
from lab.dblocks import transaction_lock
from lab.pseudonyms import ids_matching_pseudonyms, withdrawal_digest, worker_pseudonym
from studies.models import Platform, Study

WITHDRAW = CHANGE  # withdrawing a participant changes the study's data: change rights on it
# What a block made on a study says of a worker who withdrew from it, in place of its reason.
BLOCK_REASON_ERASED = "(erased: the worker withdrew from this study)"


class WithdrawalError(PlatformServiceError):
    """The withdrawal cannot be done as asked (nobody given, or nobody found); nothing changed."""


class ParticipantNotFound(WithdrawalError):
    """Nobody matching took part in the study, and nobody matching was withdrawn from it."""


@dataclass
class WithdrawalOutcome:
    """What one call did: the audit record, and whether this call erased anything; how many copies
    of the study (made from its bundle here) it withdrew the worker from, and how many more hold
    the worker but are not the acting user's to change (counts only)."""

    withdrawal: Withdrawal
    created: bool
    answers_erased: int
    tasks_ended: int
    copies_withdrawn: int = 0
    copies_not_changeable: int = 0


def _named_pseudonyms(*, pseudonym: str, worker_id: str, identifier: str) -> list[tuple[str, str]]:
    """(platform, pseudonym) pairs the request may name the worker by, as the exports write them
    (``worker_pseudonym``): a pseudonym on any platform, a platform id on each platform, a typed
    identifier as the link participant it was stored as. Call with exactly one given (and a valid
    identifier: ``identifier_hash`` raises otherwise)."""
    if pseudonym.strip():
        return [(platform, pseudonym.strip()) for platform in Platform.values]
    if worker_id.strip():
        return [(platform, worker_pseudonym(platform, worker_id.strip())) for platform in Platform.values]
    hashed = IDENTIFIER_PREFIX + identifier_hash(identifier)
    return [(Platform.LINK, worker_pseudonym(Platform.LINK, hashed))]


def _imported(study_id: int, named: list[tuple[str, str]]) -> Q:
    """The participants a bundle copy ``study_id`` made of the ``named`` workers (``imported_worker_id``)."""
    found = Q(pk__in=[])
    for platform, pseudonym in named:
        found |= Q(platform=platform, external_id=imported_worker_id(study_id, pseudonym))
    return found


def _participants(study: Study, *, pseudonym: str, worker_id: str, identifier: str) -> list[Participant]:
    """The study's participants named by exactly one of the three ways: those with a task in
    ``study``, and those who left something else of theirs there without one (a consent receipt, a
    platform binding or a qualification answer of a start that was then refused: no work left, say),
    whose withdrawal erases that."""
    given = [name for name, value in (("pseudonym", pseudonym), ("worker_id", worker_id),
                                      ("participant_identifier", identifier)) if (value or "").strip()]
    if len(given) != 1:
        raise WithdrawalError(
            "name the participant one way: their pseudonym (w_...), their platform worker id, or the "
            f"participant identifier they typed{' (not ' + ' and '.join(given) + ')' if given else ''}")
    in_study = Participant.objects.filter(
        Q(pk__in=Assignment.objects.filter(study=study).values("participant_id"))
        | Q(pk__in=ConsentReceipt.objects.filter(study=study).values("participant_id"))
        | Q(pk__in=PlatformAssignmentBinding.objects.filter(study=study).values("participant_id"))
        | Q(pk__in=QualificationGrant.objects.filter(study=study).values("participant_id")))
    try:
        named = _named_pseudonyms(pseudonym=pseudonym, worker_id=worker_id, identifier=identifier)
    except AnnotationError as exc:
        raise WithdrawalError(exc.message) from exc
    # In a copy made from a bundle, the worker is its participant of the pseudonym they are named by.
    imported = set(in_study.filter(_imported(study.pk, named)).values_list("pk", flat=True))
    if pseudonym.strip():
        ids = ids_matching_pseudonyms([pseudonym], in_study.values_list("pk", "platform", "external_id")
                                      .iterator(chunk_size=2000))
        return list(Participant.objects.filter(pk__in={*ids, *imported}).order_by("id"))
    if worker_id.strip():
        return list(in_study.filter(Q(external_id=worker_id.strip()) | Q(pk__in=imported)).order_by("id"))
    hashed = IDENTIFIER_PREFIX + identifier_hash(identifier)
    return list(in_study.filter(Q(platform=Platform.LINK, external_id=hashed) | Q(pk__in=imported)).order_by("id"))


def _digests_of_absent(study: Study, *, pseudonym: str, worker_id: str, identifier: str) -> list[str]:
    """The digests a participant no longer in the study would have been withdrawn under (in a copy
    made from a bundle too: as the copy's participant of the pseudonym they are named by)."""
    imported = [participant_withdrawal_digest(platform=platform, external_id=imported_worker_id(study.pk, named),
                                              study=study)
                for platform, named in _named_pseudonyms(pseudonym=pseudonym, worker_id=worker_id,
                                                         identifier=identifier)]
    if pseudonym.strip():
        return [withdrawal_digest(study.pk, pseudonym), *imported]
    if worker_id.strip():
        return [*(participant_withdrawal_digest(platform=p, external_id=worker_id.strip(), study=study)
                  for p in Platform.values), *imported]
    return [participant_withdrawal_digest(platform=Platform.LINK, study=study,
                                          external_id=IDENTIFIER_PREFIX + identifier_hash(identifier)), *imported]


def _copies_holding(study: Study, named: list[tuple[str, str]]) -> list[tuple[int, str]]:
    """(copy id, pseudonym) of each copy made from ``study``'s bundle on this installation (its
    ``ImportRecord``, kind ``bundle``, names ``study`` as ``original_study``) that still holds a task
    of a ``named`` worker (their participant there is ``imported_worker_id(copy, pseudonym)``), in
    copy order. A copy they were withdrawn from holds none."""
    copy_ids = sorted(set(bundle_copy_ids(original=study.pk).values_list("copy_id", flat=True)))
    if not copy_ids:
        return []
    wanted = {(platform, imported_worker_id(copy_id, pseudonym)): (copy_id, pseudonym)
              for copy_id in copy_ids for platform, pseudonym in named}
    held = set(Assignment.objects.filter(study_id__in=copy_ids,
                                         participant__external_id__in={key for _, key in wanted})
               .values_list("participant__platform", "participant__external_id").distinct())
    return sorted(pair for key, pair in wanted.items() if key in held)


def _withdraw_from_copies(*, user, study: Study, named: list[tuple[str, str]]) -> tuple[int, int]:
    """Withdraw the ``named`` worker from the copies of ``study`` that hold them
    (``_copies_holding``), each by ``participant_withdraw`` as ``user`` (which checks the user's
    change rights on that copy beside its write). Returns (copies withdrawn from, copies left as
    they were because ``user`` may not change them), copies of those copies included."""
    reached = refused = 0
    for copy_id, pseudonym in _copies_holding(study, named):
        try:
            outcome = participant_withdraw(user=user, study=copy_id, pseudonym=pseudonym)
        except PlatformAccessDenied:
            refused += 1
            continue
        reached += 1 + outcome.copies_withdrawn
        refused += outcome.copies_not_changeable
    return reached, refused


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
    # A block made on the study stays (it covers its researcher's other studies too), but what it
    # says of the worker goes with their data.
    WorkerBlock.objects.filter(study=study, participant=participant).exclude(reason=BLOCK_REASON_ERASED).update(
        reason=BLOCK_REASON_ERASED)
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


def _participant_forget(participant: Participant) -> bool:
    """Delete ``participant`` (locked by the caller), and so its raw platform id (an MTurk or
    Prolific worker's), when no row names it any more (every relation to ``Participant``, hidden ones
    included, so that a new one is asked too) and no block rests on it. Returns whether it was
    deleted. A link participant's row stays: its id is this installation's own (generated, or a
    salted hash of what they typed), and it is what their browser's cookie names, which refuses that
    browser a new task here (``participants._refuse_withdrawn_browser``); a platform worker who comes
    back is named by their platform id again, and refused by its digest. Left as it is: on
    PostgreSQL a row of another study naming the worker that a transaction wrote and had not
    committed when this one read is not seen (foreign keys are checked at commit); that start
    then fails at its commit (an error, or "not available" where it locks the row after this
    delete) and succeeds when the worker tries again, as a new participant."""
    if participant.platform == Platform.LINK:
        return False
    for relation in Participant._meta.get_fields(include_hidden=True):
        if relation.auto_created and not relation.concrete and (relation.one_to_many or relation.one_to_one):
            if relation.related_model._base_manager.filter(**{relation.field.name: participant.pk}).exists():
                return False
    deleted, _ = Participant.objects.filter(pk=participant.pk, blocked=False).delete()
    return bool(deleted)


def _refuse_while_owed(study: Study, participants: list[Participant]) -> None:
    """Raise ``WithdrawalError`` while ``participants`` are owed something in ``study`` that a
    withdrawal would make impossible to give (nothing changes; the rows read are locked, so an
    approval, rejection or bonus payment running meanwhile either commits first or waits). Locks in
    the one order a payment takes them (``bonus._pay``: the task, ``release.lock``, then its
    ``Bonus`` row): every task of ``participants`` in ``study``, by pk, then their bonuses, and those
    alone (``of=("self",)``: not the tasks their query joins), so a bonus paid again at the same
    moment waits for the withdrawal or the withdrawal for it, never each for the other (a deadlock
    on PostgreSQL):

    - a decision: tasks submitted and not reviewed that a platform holds a submission for (the
      decision could no longer be sent once the task is erased); and tasks active, returned or
      expired here whose work the platform lists as submitted and nobody decided yet (held by sync,
      ``NOT_SUBMITTED_HERE`` or ``NO_ANSWERS``), read by the worker page's rule
      (``review.submitted_not_here_to_decide``) under the tasks' locks, which a rejection or approval
      takes before its call is sent (``review._lock_undecided``): reject them, or clear their hold
      and approve them, on the worker's page;
    - money: a ``Bonus`` not settled (``SETTLED``: paid, or recorded as paid outside the app), i.e.
      pending, failed or of unknown outcome, that can still be paid: its task takes a bonus
      (``selectors.platforms.assignments_bonusable``: submitted or approved, no rejection of it sent;
      one on hold is paid once a researcher clears the hold), and,
      for a failed one, no later bonus of the same task, kind and reason was settled (a researcher
      who paid 0.50 after 0.75 failed replaced it; a bonus paid for another reason replaces nothing). A withdrawn task takes no bonus (``bonus_pay`` refuses it), so
      the bonus could never be paid. The message names each task, amount and status: pay it again
      (an unknown one after a sync, which asks the platform whether it was paid), then withdraw.
      The other unsettled bonuses do not refuse: one on a task withdrawn before, rejected, returned
      or expired can never be paid here (``bonus_pay`` refuses the task, and nobody can cancel a
      bonus), and paying a replaced one again would pay the worker twice; refusing for them would
      hold the worker's erasure hostage for good."""
    tasks = list(Assignment.objects.select_for_update(of=("self",)).filter(
        study=study, participant__in=participants).order_by("pk"))
    _refuse_while_decision_owed(tasks, whose="of this participant")
    replaced = Bonus.objects.filter(assignment_id=OuterRef("assignment_id"), kind=OuterRef("kind"),
                                    reason=OuterRef("reason"), status__in=SETTLED, pk__gt=OuterRef("pk"))
    payable = assignments_bonusable(study=study).filter(participant__in=participants)
    unsettled = list(Bonus.objects.select_for_update(of=("self",)).filter(
        assignment__in=payable).exclude(status__in=SETTLED)
        .exclude(Q(status=Bonus.Status.FAILED) & Exists(replaced)).order_by("assignment_id", "pk"))
    if unsettled:
        owed = "; ".join(f"task {b.assignment_id}: {b.amount} {b.currency}, {b.status}" for b in unsettled)
        raise WithdrawalError(
            f"bonus(es) of this participant are not paid ({owed}): pay it again first (the worker is owed the "
            "money; an unknown one after a sync, which asks the platform whether it was paid), then withdraw. "
            "Nothing was changed.")


def _refuse_while_decision_owed(tasks: list[Assignment], *, whose: str) -> None:
    """Raise ``WithdrawalError`` while one of ``tasks`` (rows locked by the caller) waits for a
    decision the withdrawal would make impossible to send (``_refuse_while_owed``): submitted and
    not reviewed with a platform submission, or listed as submitted on the platform while not here
    and not decided (``review.submitted_not_here_to_decide``). ``whose`` says how the tasks relate
    to the worker named."""
    waiting = [task.pk for task in tasks if task.status == Assignment.Status.SUBMITTED and task.platform_assignment_id]
    if waiting:
        raise WithdrawalError(
            f"task(s) {', '.join(map(str, waiting))} {whose} are submitted and not reviewed: approve or "
            "reject these first (the worker is owed a decision), then withdraw. Nothing was changed.")
    held = submitted_not_here_to_decide(tasks)
    if held:
        named = ", ".join(f"{task.pk} ({submission.publication.platform} {submission.platform_assignment_id})"
                          for task, submission in held)
        raise WithdrawalError(
            f"task(s) {named} {whose} are not submitted here, but the platform lists their work as "
            "submitted and nobody decided it: reject it, or clear its hold and approve it, on the worker's page "
            "first (the worker is owed a decision), then withdraw. Nothing was changed.")


def _platform_only_rows(study: Study, *, pseudonym: str, worker_id: str) -> list[PlatformSubmission]:
    """The study's platform rows (``PlatformSubmission``, stored by sync) that name the worker by
    their raw platform id (``worker_id``, or the id whose pseudonym on the row's platform is
    ``pseudonym``, as the exports compute it), locked: a worker the app knows only from these (work
    with no task here, ``NO_LOCAL_ASSIGNMENT``, or someone else's task held as a ``WORKER_MISMATCH``).
    A typed identifier names a link participant, who has no platform rows."""
    rows = (PlatformSubmission.objects.select_for_update(of=("self",)).filter(publication__study=study)
            .exclude(worker_id="").select_related("publication").order_by("pk"))
    if worker_id.strip():
        return list(rows.filter(worker_id=worker_id.strip()))
    if pseudonym.strip():
        candidates = (PlatformSubmission.objects.filter(publication__study=study).exclude(worker_id="")
                      .values_list("pk", "publication__platform", "worker_id").iterator(chunk_size=2000))
        return list(rows.filter(pk__in=ids_matching_pseudonyms([pseudonym], candidates)))
    return []


def _platform_only_withdraw(*, user, study: Study, rows: list[PlatformSubmission]) -> WithdrawalOutcome:
    """Withdraw a worker known only from the platform's ``rows`` (``_platform_only_rows``): refused
    while a task their rows hold waits for a decision (``_refuse_while_decision_owed``: the
    platform's submission there is theirs); else records the ``Withdrawal`` under the digest of each
    (platform, id) the rows name, which a later sync skips (``sync._publication_sync``), deletes the
    rows that hold no task and blanks the worker id of those that hold another participant's task
    (the hold stays, as ``_erase`` leaves it). Nothing was erased: no task or answer was theirs."""
    held = sorted({row.assignment_id for row in rows if row.assignment_id is not None})
    _refuse_while_decision_owed(list(Assignment.objects.select_for_update(of=("self",)).filter(pk__in=held)
                                     .order_by("pk")), whose="holding this worker's platform submission")
    outcome = None
    for platform, external_id in sorted({(row.publication.platform, row.worker_id) for row in rows}):
        record, created = Withdrawal.objects.select_for_update().get_or_create(
            study=study, digest=participant_withdrawal_digest(platform=platform, external_id=external_id, study=study),
            defaults={"withdrawn_by": actor(user)})
        outcome = outcome or WithdrawalOutcome(withdrawal=record, created=created, answers_erased=0, tasks_ended=0)
    PlatformSubmission.objects.filter(pk__in=[row.pk for row in rows if row.assignment_id is None]).delete()
    PlatformSubmission.objects.filter(pk__in=[row.pk for row in rows if row.assignment_id is not None]).update(
        worker_id="")
    return outcome


def participant_withdraw(*, user, study: Study | int, pseudonym: str = "", worker_id: str = "",
                         participant_identifier: str = "") -> WithdrawalOutcome:
    """Withdraw a participant from ``study`` as ``user`` (change rights on the study: refused with
    ``PlatformAccessDenied`` otherwise), naming them by exactly one of their pseudonym, their
    platform worker id, or the participant identifier they typed. Erases their data from the study
    and records the withdrawal (see the module's docstring), all in one transaction. Idempotent:
    withdrawing someone already withdrawn returns their record (``created`` False) and changes
    nothing. ``WithdrawalError`` naming the tasks, before anything changes, while a task of theirs
    in the study is submitted on a platform and not reviewed (or its work is listed as submitted on
    the platform while the task here is not, and nobody decided it), or while a bonus on a task of theirs is
    not paid (pending, failed, outcome unknown) (``_refuse_while_owed``).
    A worker the study knows only from its platform rows (sync stored work of theirs that has no
    task here, or that another participant's task holds) is withdrawn too: their rows' raw ids go and
    the record is made (``_platform_only_withdraw``).
    ``ParticipantNotFound`` when nobody matching took part in the study, is named by its platform
    rows, or was withdrawn from it; ``WithdrawalError`` for a request that names nobody or two ways at once.
    In the same transaction, withdraws them from the copies of the study made from its bundle here
    that still hold their tasks and that ``user`` may change, and counts the others
    (``_withdraw_from_copies``; the outcome's ``copies_withdrawn``, ``copies_not_changeable``); in
    such a copy they are also found by what named them in the original (``_participants``)."""
    study = access_study(user=user, study=study, access=WITHDRAW)
    with transaction.atomic():
        # Alone: a sync storing a row of the worker meanwhile waits, then reads this withdrawal.
        transaction_lock(WITHDRAWAL_LOCK, study.pk)
        participants = _participants(study, pseudonym=pseudonym, worker_id=worker_id, identifier=participant_identifier)
        if not participants:
            # Known only from the platform's rows (work with no task here): their raw id goes too.
            rows = _platform_only_rows(study, pseudonym=pseudonym, worker_id=worker_id)
            if rows:
                return _platform_only_withdraw(user=user, study=study, rows=rows)
            digests = _digests_of_absent(study, pseudonym=pseudonym, worker_id=worker_id,
                                         identifier=participant_identifier)
            existing = Withdrawal.objects.filter(study=study, digest__in=digests).order_by("id").first()
            if existing is None:
                raise ParticipantNotFound(f"nobody matching took part in study {study.pk}, and nobody matching was "
                                          "withdrawn from it: check the pseudonym or id")
            # Withdrawn here before: a copy made since (from an older bundle) is reached now.
            reached, refused = _withdraw_from_copies(user=user, study=study, named=_named_pseudonyms(
                pseudonym=pseudonym, worker_id=worker_id, identifier=participant_identifier))
            return WithdrawalOutcome(withdrawal=existing, created=False, answers_erased=0, tasks_ended=0,
                                     copies_withdrawn=reached, copies_not_changeable=refused)
        for participant in participants:
            list(Participant.objects.select_for_update().filter(pk=participant.pk).values_list("pk"))
        _refuse_while_owed(study, participants)
        outcome = None
        for participant in participants:  # one person; two only when one id exists on two platforms
            digest = participant_withdrawal_digest(platform=participant.platform, external_id=participant.external_id,
                                                   study=study)
            record, created = Withdrawal.objects.select_for_update().get_or_create(
                study=study, digest=digest, defaults={"withdrawn_by": actor(user)})
            n_answers, n_counted, n_tasks = _erase(study, participant)
            _participant_forget(participant)
            if n_answers or n_tasks:
                Withdrawal.objects.filter(pk=record.pk).update(
                    n_answers=record.n_answers + n_answers, n_counted_answers=record.n_counted_answers + n_counted,
                    n_tasks=record.n_tasks + n_tasks)
                record.refresh_from_db()
            outcome = outcome or WithdrawalOutcome(withdrawal=record, created=created, answers_erased=n_answers,
                                                   tasks_ended=n_tasks)
        # The copies made from this study's bundle hold them under the pseudonym its exports showed.
        outcome.copies_withdrawn, outcome.copies_not_changeable = _withdraw_from_copies(
            user=user, study=study, named=[(p.platform, worker_pseudonym(p.platform, p.external_id))
                                           for p in participants])
        return outcome
