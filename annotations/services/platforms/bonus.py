"""Bonuses: the same bonus (assignment, amount, kind, reason) is one ``Bonus`` row, paid once.

A flagged-error bonus needs a flag a researcher accepted (``annotations.services.flags``); work
on hold (a worker-id mismatch found by sync) is paid nothing until a researcher clears it. A
refusal is recorded on the row (``failed`` with its error); an answer that was lost (a timeout, a
dropped connection) leaves the row ``unknown`` for sync to reconcile, never ``failed``."""
from __future__ import annotations

import re
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotations.models import Assignment, Bonus, FlagReview, Participant, PlatformCall, Publication
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError, PlatformTransientError, money
from annotations.selectors.platforms import (
    BONUS_STATUSES,
    assignments_bonusable,
    assignments_on_hold,
    study_prolific_study_ids,
)
from annotations.services.payments import (
    CallOutcomeUnknown,
    CallSpec,
    PlatformServiceError,
    platform_call_execute,
    platform_call_note_error,
)
from annotations.services.release import lock
from lab.transitions import TransitionError
from studies.models import Platform, Study

from .access import BONUS, access_study, assignment_of, study_assignments
from .calls import reconciler
from .common import (
    OP,
    actor,
    assignment_platform,
    each_assignment,
    participant_pseudonym,
    participant_redaction,
    platform_work_confirm,
    redacted,
)
from .tokens import bonus_token

AMOUNT_TEXT = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,2})?")


def bonus_amount(value) -> Decimal:
    """A bonus amount checked: a positive number of whole cents within ``RL_MAX_BONUS``. Text (a
    form's field, a task's argument) must read like ``0.50``: digits, at most two decimals;
    ``NaN``, ``Infinity`` and ``1e999999``, numbers to ``Decimal``, are not amounts. A clear
    ``PlatformServiceError`` otherwise."""
    if isinstance(value, str):
        text = value.strip()
        if not AMOUNT_TEXT.fullmatch(text):
            raise PlatformServiceError(f"bonus amount {text[:40]!r} is not an amount such as 0.50 (digits, at most "
                                       "two decimals)")
        amount = Decimal(text)
    elif isinstance(value, Decimal | int) and not isinstance(value, bool):
        amount = Decimal(value)
        if not amount.is_finite():
            raise PlatformServiceError(f"bonus amount {value} is not an amount such as 0.50")
    else:
        raise PlatformServiceError(f"bonus amount {value!r} is not an amount such as 0.50")
    limit = Decimal(str(settings.RL_MAX_BONUS))
    if amount > limit:
        raise PlatformServiceError(f"bonus amount {amount} is above the limit of {limit} (RL_MAX_BONUS)")
    if amount <= 0 or amount != money(amount):
        raise PlatformServiceError(f"bonus amount {amount} must be positive with at most two decimals")
    return amount


def _bonus_checks(*, amount, reason: str, kind: str) -> tuple[Decimal, str]:
    amount = bonus_amount(amount)
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("a bonus needs a reason the worker will read")
    if kind not in Bonus.Kind.values:
        raise PlatformServiceError(f"bonus kind {kind!r} is not one of {', '.join(Bonus.Kind.values)}")
    return amount, reason


def bonus_pay(*, user, study: Study, assignment: Assignment, amount: Decimal | str, reason: str,
              kind: str = Bonus.Kind.OTHER) -> Bonus:
    """Pay ``amount`` to the worker of ``assignment``, a task of ``study``, as ``user`` (PAY access
    to the study, ``access.access_study``). The same bonus (assignment, amount, kind, reason) is
    one ``Bonus`` row and is paid once, however often this is called."""
    study = access_study(user=user, study=study, access=BONUS)
    amount, reason = _bonus_checks(amount=amount, reason=reason, kind=kind)
    return _pay(assignment_of(study=study, assignment=assignment), amount=amount, reason=reason, kind=kind,
                user=user)


def study_bonuses_pay(*, user, study: Study, assignment_ids: list[int], amount: Decimal | str, reason: str,
                      kind: str = Bonus.Kind.OTHER) -> dict:
    """Pay the same bonus to the workers of ``assignment_ids``, as ``user`` (PAY access to
    ``study``). An id of another study's task refuses the batch: nothing is paid. The one batch of
    bonuses: the publish page runs it inline and ``pay_bonuses_task`` runs it per batch. No
    single assignment stops the batch: a refusal, or an id that no longer exists (a worker who
    withdrew after the batch was queued), is in ``errors`` with the assignment's id (and a refusal
    on its bonus row); one whose outcome is not known yet is in ``errors`` and its id in
    ``unsettled``, for a retry or the next sync."""
    study = access_study(user=user, study=study, access=BONUS)
    amount, reason = _bonus_checks(amount=amount, reason=reason, kind=kind)
    assignments, gone = study_assignments(study=study, ids=assignment_ids)

    def pay_one(assignment: Assignment) -> None:
        bonus = _pay(assignment, amount=amount, reason=reason, kind=kind, user=user)
        if bonus.status not in SETTLED:  # a set-up that paid nothing
            raise CallOutcomeUnknown(f"bonus for assignment {assignment.pk} was not paid: {bonus.error}")

    paid, errors, unsettled = each_assignment(assignments, pay_one, user=user, access=BONUS)
    return {"paid": paid, "errors": gone + errors, "unsettled": unsettled}


class _SetupPaidNothing(PlatformServiceError):
    """A Prolific bonus's set-up that paid nothing, before any pay call of its token was sent: its
    answer was lost (``lost``), or it answered after sync had settled it as not applied. The bonus
    is safe to pay again (a new set-up, paid by the pay call, once per token)."""

    def __init__(self, message: str, *, lost: bool):
        super().__init__(message)
        self.lost = lost


def _check_bonus_status(assignment: Assignment) -> None:
    """Refuse a bonus for ``assignment`` unless its task is in ``BONUS_STATUSES``."""
    if assignment.status not in BONUS_STATUSES:
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {assignment.get_status_display().lower()}: bonuses go to submitted "
            "or approved work"
        )


def _lock_bonusable(assignment: Assignment) -> Assignment:
    """``assignment`` read again under its row lock (``release.lock``, the lock a rejection and a
    withdrawal take to end the task), inside the caller's transaction that creates its ``Bonus``
    row: refused (``PlatformServiceError``, nothing recorded) when the task is no longer in
    ``BONUS_STATUSES`` (rejected, or its worker withdrew, since the caller read it: a batch reads
    all its tasks up front), when it no longer exists, or when a rejection of its work was sent
    (a rejection in flight, not recorded on the task yet): the rule of
    ``selectors.platforms.assignments_bonusable``, which the publish page's candidates follow too."""
    try:
        locked = lock(assignment)
    except Assignment.DoesNotExist:
        raise PlatformServiceError(f"assignment {assignment.pk} no longer exists (its worker withdrew or it was "
                                   "deleted): it is paid nothing") from None
    _check_bonus_status(locked)
    if not assignments_bonusable().filter(pk=locked.pk).exists():
        raise PlatformServiceError(
            f"assignment {assignment.pk} is being rejected (its rejection was sent to "
            f"{assignment_platform(assignment)}): bonuses go to submitted or approved work")
    return locked


def _bonus_refusal(assignment: Assignment) -> str:
    """``_lock_bonusable``'s refusal as text, "" when the bonus may go: the ``guard`` of a call
    that moves a bonus's money (``platform_call_execute``), run again in the transaction that marks
    it sent, under the task's row lock (the call's row, then the task's, as a review decision's
    guard takes them: ``review._contrary_refusal``). The first check commits before the call is
    recorded, and a rejection sent in between (its own guard sees no bonus: a bonus does not stop a
    rejection) was not seen: the bonus was paid on rejected work."""
    try:
        _lock_bonusable(assignment)
    except PlatformServiceError as exc:
        return _message(exc)
    return ""


def _pay(assignment: Assignment, *, amount: Decimal, reason: str, kind: str, user) -> Bonus:
    """Pay one checked bonus for ``assignment``, whose study's access the caller checked. Its
    status is checked again under its row lock where the ``Bonus`` row is created
    (``_lock_bonusable``): a rejection or withdrawal since the caller read it refuses the bonus."""
    _check_bonus_status(assignment)
    if kind == Bonus.Kind.FLAGGED_ERROR and not FlagReview.objects.filter(
            annotation__claim__assignment=assignment, decision=FlagReview.Decision.ACCEPTED).exists():
        raise PlatformServiceError(
            f"assignment {assignment.pk} has no accepted flag: accept the flag (Flagged questions and explanations) "
            "before paying its bonus")
    if assignments_on_hold(study=assignment.study).filter(pk=assignment.pk).exists():
        raise PlatformServiceError(
            f"assignment {assignment.pk} is on hold: the platform's worker is not the participant who answered; "
            "clear or reject it first")
    name = assignment_platform(assignment)
    platform = get_platform(name)
    token = bonus_token(assignment=assignment, amount=amount, kind=kind, reason=reason)
    with transaction.atomic():
        # The worker's row first, as a withdrawal (``participant_withdraw``: the worker, then their
        # tasks) and a start take it: the ``Bonus`` row inserted below takes FOR KEY SHARE on it for
        # its foreign key, which waited on a withdrawal's FOR UPDATE while that waited on this
        # task ("deadlock detected"). Now the bonus waits for the withdrawal before it locks the task.
        list(Participant.objects.select_for_update(no_key=True).filter(pk=assignment.participant_id)
             .values_list("pk"))
        _lock_bonusable(assignment)
        bonus, _ = Bonus.objects.select_for_update().get_or_create(
            token=token,
            defaults={"assignment": assignment, "participant": assignment.participant, "kind": kind,
                      "amount": money(amount), "currency": platform.currency, "reason": reason,
                      "created_by": actor(user)},
        )
        if bonus.status in SETTLED:
            return bonus
        if name == Platform.LINK:
            Bonus.STATUS.move(bonus, Bonus.Status.RECORDED)
            return bonus
    summary = {"platform_assignment_id": assignment.platform_assignment_id,
               "worker": participant_pseudonym(assignment.participant), "amount": str(bonus.amount), "kind": kind,
               "reason": reason[:500]}
    common = {"user": actor(user), "study": assignment.study, "assignment": assignment,
              "redact": participant_redaction(assignment.participant)}
    key = _pay_key(name, token)
    try:
        platform_work_confirm(assignment)  # refused: the bonus row fails with the reason, nothing is sent
        if name == Platform.PROLIFIC:
            call = _prolific_bonus(platform=platform, assignment=assignment, bonus=bonus, summary=summary,
                                   common=common)
        else:
            call = platform_call_execute(
                spec=CallSpec(platform=name, operation=OP.BONUS, idempotency_key=key,
                              platform_token=token, amount=bonus.amount, currency=bonus.currency,
                              request_summary=summary, **common),
                send=lambda: platform.bonus(worker_id=assignment.participant.external_id,
                                            platform_assignment_id=assignment.platform_assignment_id,
                                            amount=bonus.amount, reason=reason, token=token),
                reconcile=reconciler(platform),
                guard=lambda: _bonus_refusal(assignment),
            )
    except _SetupPaidNothing as exc:
        # Only a set-up was sent (it moves no money) and no pay call: nothing was paid.
        error = redacted(exc.message, assignment.participant)
        if _setup_paid_nothing(bonus, error=error):
            if exc.lost:
                raise CallOutcomeUnknown(f"bonus for assignment {assignment.pk} was not paid: {error}") from exc
            bonus.refresh_from_db()
            return bonus  # pending: paying it again sets up a new record and pays that one
        if not _bonus_move(bonus, Bonus.Status.UNKNOWN, error=error):  # another attempt's pay call was sent
            bonus.refresh_from_db()
            return bonus  # paid meanwhile by another attempt's set-up and pay call
        raise CallOutcomeUnknown(f"bonus for assignment {assignment.pk}: outcome unknown ({error}); "
                                 "the next sync asks the platform whether it was paid") from exc
    except (PlatformTransientError, CallOutcomeUnknown) as exc:
        # Sent, and the answer was lost (or an earlier attempt's still is): the money may have moved.
        error = redacted(_message(exc), assignment.participant)
        if not _bonus_move(bonus, Bonus.Status.UNKNOWN, error=error,
                           platform_call=PlatformCall.objects.filter(idempotency_key=key).first()):
            bonus.refresh_from_db()
            return bonus  # paid meanwhile by another attempt: this attempt's lost answer changes nothing
        raise CallOutcomeUnknown(f"bonus for assignment {assignment.pk}: outcome unknown ({error}); "
                                   "the next sync asks the platform whether it was paid") from exc
    except (PlatformError, PlatformServiceError) as exc:
        error = redacted(_message(exc), assignment.participant)
        if not _bonus_move(bonus, Bonus.Status.FAILED, error=error):
            bonus.refresh_from_db()
            return bonus  # paid meanwhile by another attempt: this attempt's refusal changes nothing
        raise PlatformServiceError(f"bonus for assignment {assignment.pk} failed: {error}") from exc
    _bonus_move(bonus, Bonus.Status.PAID, error="", paid_at=timezone.now(), platform_call=call)
    bonus.refresh_from_db()
    return bonus


def _message(exc: Exception) -> str:
    return getattr(exc, "message", "") or str(exc)


SETTLED = (Bonus.Status.PAID, Bonus.Status.RECORDED)


def _bonus_move(bonus: Bonus, status: str | None, *, unless_paying_on: str = "", **fields) -> bool:
    """Move ``bonus`` through ``Bonus.STATUS`` (``status`` None: stay) and set ``fields``, under
    its row lock: the one locked transition of a bonus's status. A ``platform_call`` of None
    leaves the recorded one. A bonus another attempt settled meanwhile (paid, or recorded as paid
    outside the app) is left as it is when asked to move elsewhere (an older attempt's lost or
    refused answer changes nothing paid): False then. ``unless_paying_on`` (a platform): left as it
    is too (False) when a pay call of its token was sent there (``_pay_call_sent``, read under the
    lock: another attempt's set-up went on to pay it)."""
    with transaction.atomic():
        locked = Bonus.objects.select_for_update().get(pk=bonus.pk)
        if locked.status in SETTLED and status not in (None, locked.status):
            return False
        if unless_paying_on and _pay_call_sent(platform=unless_paying_on, token=locked.token):
            return False
        if fields.get("platform_call", 0) is None:
            fields.pop("platform_call")
        if (status is None or not Bonus.STATUS.move(locked, status, **fields)) and fields:
            for name, value in fields.items():
                setattr(locked, name, value)
            locked.save(update_fields=list(fields))
        return True


def bonus_reconciled(*, token: str, call: PlatformCall, applied: bool) -> None:
    """Sync found out what became of a bonus call whose answer was lost: paid, or never applied
    (the bonus goes back to pending, to be paid again under the same token).

    A Prolific set-up call (``OP.BONUS_SETUP``) moves no money: it creates a bulk-bonus record that
    only its pay call pays, by the id the lost answer carried. Settled as not applied while no pay
    call of the token was sent or confirmed, its unknown bonus was never paid: it goes back to
    pending too, and paying it again sets up a new record and pays that one (the lost one, if
    Prolific created it, is never paid). A set-up found applied pays nothing: the bonus stays."""
    if call.operation == OP.BONUS_SETUP:
        if applied or _pay_call_sent(platform=call.platform, token=token):
            return
        why = SETUP_LOST
    else:
        why = "the platform has no record of it: safe to pay again"
    for bonus in Bonus.objects.filter(token=token).exclude(status__in=SETTLED):
        if applied:
            _bonus_move(bonus, Bonus.Status.PAID, error="", paid_at=timezone.now(), platform_call=call)
        elif bonus.status == Bonus.Status.UNKNOWN:
            _bonus_move(bonus, Bonus.Status.PENDING, error=why)


SETUP_LOST = "its set-up's answer was lost and no payment was sent: safe to pay again"


def bonuses_settle_from_calls(*, study) -> int:
    """Settle by their calls the bonuses of ``study`` not settled (unknown, pending) whose call is
    settled (confirmed or failed): what ``bonus_reconciled`` would have done had the sync that
    settled the call not died before it. No later sync looks at a settled call, so the bonus read
    "outcome unknown" or "pending" for good though it was paid (or was safe to pay again). The pay
    call decides where there is one, else the set-up call (``bonus_reconciled``'s rules: a pending
    bonus moves only to paid); a bonus whose call is still sent is left to its reconciliation.
    Returns how many bonuses had a settled call."""
    settled = [PlatformCall.Status.CONFIRMED, PlatformCall.Status.FAILED]
    n = 0
    for bonus in Bonus.objects.filter(assignment__study=study, status__in=[Bonus.Status.UNKNOWN,
                                                                           Bonus.Status.PENDING]).order_by("pk"):
        keys = [*(_pay_key(platform, bonus.token) for platform in Platform.values), _setup_key(bonus.token)]
        calls = {call.operation: call for call in PlatformCall.objects.filter(
            study=study, operation__in=[OP.BONUS, OP.BONUS_SETUP], idempotency_key__in=keys, status__in=settled)}
        call = calls.get(OP.BONUS) or calls.get(OP.BONUS_SETUP)
        if call is not None:
            bonus_reconciled(token=bonus.token, call=call, applied=call.status == PlatformCall.Status.CONFIRMED)
            n += 1
    return n


def _pay_key(platform: str, token: str) -> str:
    """The idempotency key of the call that pays the bonus ``token`` on ``platform`` (one per bonus,
    whoever sends it: ``calls.bonus_call_token`` reads the token back)."""
    return f"{platform}:bonus:{token}"


def _setup_key(token: str) -> str:
    return f"{Platform.PROLIFIC}:bonus_setup:{token}"


def _pay_call_sent(*, platform: str, token: str) -> bool:
    """Whether a pay call of the bonus ``token`` was sent (confirmed, or its answer not known)."""
    return PlatformCall.objects.filter(
        operation=OP.BONUS, idempotency_key=_pay_key(platform, token),
        status__in=[PlatformCall.Status.SENT, PlatformCall.Status.CONFIRMED]).exists()


def _setup_paid_nothing(bonus: Bonus, *, error: str) -> bool:
    """Put ``bonus``, whose set-up paid nothing (``_SetupPaidNothing``), back to pending with
    ``error`` (and its set-up call, where one was recorded), through ``_bonus_move``, unless it was
    paid meanwhile or a pay call of its token was sent (another attempt's): False then, nothing
    changed."""
    setup = PlatformCall.objects.filter(idempotency_key=_setup_key(bonus.token)).first()
    return _bonus_move(bonus, Bonus.Status.PENDING, unless_paying_on=Platform.PROLIFIC, error=error,
                       platform_call=setup)


def _prolific_bonus(*, platform, assignment, bonus, summary, common) -> PlatformCall:
    # The study id sent is the study's own published Prolific study, never a worker's STUDY_ID.
    own = study_prolific_study_ids(study=assignment.study)
    if assignment.platform_task_id and assignment.platform_task_id not in own:
        raise PlatformServiceError(
            f"assignment {assignment.pk} names Prolific study {assignment.platform_task_id!r}, which is not this "
            "study's: it is paid nothing")
    publication = (Publication.objects.filter(study=assignment.study, platform=Platform.PROLIFIC, dry_run=False)
                   .exclude(external_ids=[]).order_by("-batch").first())
    study_external_id = assignment.platform_task_id or (publication.prolific_study_id if publication else "")
    if not study_external_id:
        raise PlatformServiceError(f"assignment {assignment.pk} has no Prolific study id: sync the study first")
    key = _setup_key(bonus.token)
    answered: dict = {}

    def send() -> dict:
        answered.update(platform.bonus_setup(study_external_id=study_external_id,
                                             submission_id=assignment.platform_assignment_id, amount=bonus.amount))
        return answered

    try:
        setup = platform_call_execute(
            spec=CallSpec(platform=Platform.PROLIFIC, operation=OP.BONUS_SETUP, idempotency_key=key,
                          request_summary={**summary, "study_id": study_external_id}, **common),
            send=send,
            reconcile=reconciler(platform),  # not applied once its settle window is over: set it up again
        )
    except (PlatformTransientError, CallOutcomeUnknown) as exc:
        # A set-up moves no money: with no pay call of this token sent, nothing was paid.
        if _pay_call_sent(platform=Platform.PROLIFIC, token=bonus.token):
            raise
        raise _SetupPaidNothing(f"{SETUP_LOST} ({_message(exc)})", lost=True) from exc
    except TransitionError:
        # The set-up answered after sync had settled it as not applied (a sync during a slow
        # set-up): that attempt stays not applied, and the record it created is never paid.
        if not PlatformCall.objects.filter(idempotency_key=key, status=PlatformCall.Status.FAILED).exists():
            raise
        late = f"bulk-bonus record {answered.get('id', '?')} " if answered else ""
        note = (f"answered after sync settled it as not applied: its {late}is never paid; the bonus is "
                "safe to pay again")
        platform_call_note_error(call=PlatformCall.objects.get(idempotency_key=key), error=note)
        raise _SetupPaidNothing(f"its set-up {note}", lost=False) from None
    bulk_id = setup.response["id"]
    _bonus_move(bonus, None, platform_call=setup)
    return platform_call_execute(
        spec=CallSpec(platform=Platform.PROLIFIC, operation=OP.BONUS,
                      idempotency_key=_pay_key(Platform.PROLIFIC, bonus.token),
                      amount=bonus.amount, currency=bonus.currency,
                      request_summary={**summary, "bulk_bonus_id": bulk_id}, **common),
        send=lambda: platform.bonus_pay(bulk_id=bulk_id),
        reconcile=reconciler(platform),
        guard=lambda: _bonus_refusal(assignment),
    )
