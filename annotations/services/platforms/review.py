"""Reviewing submitted work: approve (pays the reward) and reject (with the reason the worker
reads), one at a time or every submitted assignment of a study."""
from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from annotations.models import Assignment, PlatformCall, PlatformSubmission
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformNotFound, PlatformTransientError, money
from annotations.platforms.prolific import MIN_REJECTION_MESSAGE, REJECTION_CATEGORIES
from annotations.selectors import HOLDING_FLAGS
from annotations.selectors.platforms import (
    CONTRARY_DECISION,
    assignments_on_hold,
    contrary_sent,
    ended_on_platform_cleared,
    review_key,
    review_sent,
)
from annotations.services.payments import (
    CallOutcomeUnknown,
    CallSpec,
    PlatformServiceError,
    platform_call_execute,
)
from annotations.services.release import assignment_release, lock, units_recount_completed
from annotations.services.stopping import unit_decide_for_assignment
from studies.models import Platform, Study

from .access import APPROVE, REJECT, access_study, assignment_of, study_assignments
from .calls import reconciler
from .common import (
    OP,
    NotThisTasksWork,
    actor,
    assignment_platform,
    each_assignment,
    participant_pseudonym,
    participant_redaction,
    platform_work_confirm,
)

# The statuses of a task never submitted (nor decided) here. Work the platform lists as submitted
# under such a task (sync flags it ``NOT_SUBMITTED_HERE``, or ``NO_ANSWERS`` when nothing was
# answered) may be rejected; approved only one task at a time after a researcher cleared its hold,
# never by "Approve all". The task keeps its status here (an active task submitted later takes the
# platform's outcome at the next sync). An approval follows a researcher's clear (``cleared_at``,
# ``cleared_by`` on its ``PlatformSubmission``); a rejection is recorded by its ``PlatformCall`` only
# and leaves the hold in place (putting back one the researcher had cleared), so an active task the worker finishes here after it stays held (not
# counted, never in "Approve all") until sync takes the rejection over.
NOT_SUBMITTED_HERE_STATUSES = (Assignment.Status.ACTIVE, Assignment.Status.RETURNED, Assignment.Status.EXPIRED)
PLATFORM_SUBMITTED_NOT_HERE = (PlatformSubmission.Flag.NOT_SUBMITTED_HERE, PlatformSubmission.Flag.NO_ANSWERS)


def assignment_reviewed(assignment_id: int, *, approved: bool) -> bool:
    """Record the review outcome locally (after the platform confirmed it, or as sync found it),
    through ``Assignment.STATUS``: approved work stays counted; rejected work gives its unit slots
    back (``release.assignment_release``), so the units take other workers. Returns whether the
    assignment moved (False: already there, withdrawn by its participant, or never submitted here:
    ``NOT_SUBMITTED_HERE_STATUSES``, whose outcome on the platform leaves the task as it is)."""
    assignment = Assignment.objects.get(pk=assignment_id)
    if assignment.status == Assignment.Status.WITHDRAWN:
        return False  # its participant withdrew: a late platform outcome changes nothing here
    if assignment.status in NOT_SUBMITTED_HERE_STATUSES:
        return False  # decided on the platform only: a returned or expired task is not made submitted
    if not approved:
        return assignment_release(assignment=assignment, status=Assignment.Status.REJECTED,
                                  reviewed_at=timezone.now())
    with transaction.atomic():
        locked = Assignment.objects.select_for_update().get(pk=assignment_id)
        return Assignment.STATUS.move(locked, Assignment.Status.APPROVED, reviewed_at=timezone.now())


def submission_clear(*, user, submission: PlatformSubmission) -> PlatformSubmission:
    """A researcher's decision on work that sync put on hold (``HOLDING_FLAGS``: the platform's
    worker id is not the local participant's, the platform does not list the work, or the platform
    lists as submitted work whose task here is not), as ``user`` (PAY access to its study): the
    work counts again and may be approved and paid (work not submitted here counts no more than
    before, and may be approved only on its own: ``assignment_approve``, never "Approve all"). To
    refuse it, reject the assignment instead."""
    submission = PlatformSubmission.objects.select_related("publication").get(pk=submission.pk)
    access_study(user=user, study=submission.publication.study_id, access=APPROVE)
    with transaction.atomic():
        locked = PlatformSubmission.objects.select_for_update().get(pk=submission.pk)
        if locked.flag not in HOLDING_FLAGS:
            raise PlatformServiceError(
                f"submission {locked.platform_assignment_id} is not on hold (sync holds only work whose "
                "platform worker is someone else, work the platform does not list, or work the platform lists as "
                "submitted whose task here is not)")
        if locked.cleared_at is None and locked.assignment_id is not None and _decided_on_platform(
                locked.assignment) == "rejected":
            raise PlatformServiceError(
                f"submission {locked.platform_assignment_id}: its work was rejected from here; the hold stays "
                "until sync takes the rejection over (a cleared hold would count rejected work, and Approve all "
                "would send an approval after the rejection)")
        if locked.cleared_at is None:
            locked.cleared_at, locked.cleared_by = timezone.now(), actor(user)
            locked.save(update_fields=["cleared_at", "cleared_by"])
            if locked.assignment_id is not None:  # the work counts again: so does ``n_completed``
                units_recount_completed(assignment_ids=[locked.assignment_id])
    if locked.assignment_id:
        unit_decide_for_assignment(assignment_id=locked.assignment_id)  # its answers count again
    return locked


def _check_on_hold(assignment: Assignment) -> None:
    if assignments_on_hold(study=assignment.study).filter(pk=assignment.pk).exists():
        raise PlatformServiceError(
            f"assignment {assignment.pk} is on hold: sync found another worker holds it on the platform, "
            "or the platform does not list it. Clear it (Platform submissions) or reject it")


def _check_reviewable(assignment: Assignment) -> None:
    if assignment.status == Assignment.Status.SUBMITTED:
        return
    status = assignment.get_status_display().lower()
    held = submitted_not_here(assignment)
    if held is None:
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {status}, not submitted: only submitted work can be approved or rejected")
    approvable = held.flag == PlatformSubmission.Flag.NOT_SUBMITTED_HERE
    raise PlatformServiceError(
        f"assignment {assignment.pk} is {status} here, not submitted, though {held.publication.platform} lists its "
        f"work ({held.platform_assignment_id}) as submitted (sync: {held.get_flag_display()!r}): it is never approved "
        "with the others; reject it" + (", or clear its hold (Platform submissions) and approve this task on its own"
                                        if approvable else ""))


def submitted_not_here(assignment: Assignment) -> PlatformSubmission | None:
    """The platform's row (``PLATFORM_SUBMITTED_NOT_HERE``) of ``assignment`` when the platform
    lists it as submitted and its task here is active, returned or expired; None otherwise."""
    if assignment.status not in NOT_SUBMITTED_HERE_STATUSES or not assignment.platform_assignment_id:
        return None
    return (PlatformSubmission.objects.select_related("publication")
            .filter(assignment=assignment, platform_assignment_id=assignment.platform_assignment_id,
                    publication__dry_run=False, flag__in=PLATFORM_SUBMITTED_NOT_HERE).order_by("-id").first())


def submitted_not_here_to_decide(assignments) -> list[tuple[Assignment, PlatformSubmission]]:
    """Of ``assignments``, those the platform lists as submitted while their task here is not
    (``submitted_not_here``) and that no approval or rejection was sent for yet, each with its
    platform row (``cleared_at``: the researcher cleared it for approval): what a worker's page
    offers to reject or approve."""
    out = []
    for assignment in assignments:
        held = submitted_not_here(assignment)
        if held is not None and not _decided_on_platform(assignment) and not _decided_there(held):
            out.append((assignment, held))
    return out


def _decided_on_platform(assignment: Assignment) -> str:
    """"approved" or "rejected" when an approval or rejection of ``assignment``'s platform work
    was sent (confirmed, or its outcome not known yet: ``review_sent``); "" when none was."""
    for operation, outcome in ((OP.APPROVE, "approved"), (OP.REJECT, "rejected")):
        if _sent(assignment, operation):
            return outcome
    return ""


def _sent(assignment: Assignment, operation: str) -> bool:
    """Whether the approval or rejection (``operation``) of ``assignment``'s platform work was sent
    from here and is not settled as not applied (``review_sent``: confirmed, or its answer lost)."""
    return Assignment.objects.filter(pk=assignment.pk).filter(review_sent(operation)).exists()


# What a refusal calls the contrary decision a review decision waits on (``CONTRARY_DECISION``).
_CONTRARY_WORDS = {OP.REJECT: ("rejected", "rejection"), OP.APPROVE: ("approved", "approval")}


def _contrary_refusal(assignment: Assignment, *, operation: str) -> str:
    """Why the approval or rejection (``operation``) of ``assignment`` must not be sent, "" when it
    may: the contrary decision on its work was sent from here and is not settled as not applied
    (``selectors.platforms.contrary_sent``: its answer lost, or confirmed; the rule the publish
    page's "Approve all" lists by too), read under the task's row lock (``release.lock``), which it
    takes. A rejection whose answer was lost leaves the task submitted, and an approval sent
    then would override it and pay the reward (the platform takes it while the rejection is not
    applied); a rejection after a lost approval would refuse work the platform may have paid. Once
    sync settles the lost call as not applied (``failed``), the other decision may be sent; settled
    applied, the task is decided and ``_check_reviewable`` refuses both. The rule of
    ``_lock_bonusable`` too. Run twice for each decision: first on its own (``_lock_undecided``, a
    refusal before any call is recorded), then as its call's ``guard``, in the transaction that
    marks the call sent (``platform_call_execute``: the call's row, then the task's), so that of an
    approval and a rejection sent at once the second, waiting on the task's lock, sees the first."""
    contrary = CONTRARY_DECISION[operation]
    state, noun = _CONTRARY_WORDS[contrary]
    try:
        locked = lock(assignment)
    except Assignment.DoesNotExist:
        return f"assignment {assignment.pk} no longer exists (its worker withdrew or it was deleted): nothing was sent"
    if not Assignment.objects.filter(pk=locked.pk).filter(contrary_sent(operation)).exists():
        return ""
    name = assignment_platform(assignment)
    confirmed = PlatformCall.objects.filter(idempotency_key=review_key(name, contrary, assignment),
                                            status=PlatformCall.Status.CONFIRMED).exists()
    if confirmed:
        return (f"assignment {assignment.pk} was {state} on {name} (its {noun} was confirmed): nothing was sent. "
                "The next sync records the decision here")
    return (f"assignment {assignment.pk} is being {state} (its {noun} was sent to {name}, its outcome not recorded "
            f"yet): nothing was sent. The next sync settles it; decide again if it finds the {noun} not applied")


def _lock_undecided(assignment: Assignment, *, operation: str) -> None:
    """``_contrary_refusal`` on its own, before the decision's call is recorded: a refusal raises
    ``PlatformServiceError`` and nothing is recorded or sent."""
    with transaction.atomic():
        refusal = _contrary_refusal(assignment, operation=operation)
    if refusal:
        raise PlatformServiceError(refusal)


def _decided_there(held: PlatformSubmission) -> str:
    """"approved" or "rejected" when the platform's last listing (``platform_status``, kept by sync)
    shows the work decided on the platform itself (its auto-approval, its own site); "" otherwise."""
    status = (held.platform_status or "").strip().lower()
    return status if status in ("approved", "rejected") else ""


def _check_not_here_decidable(assignment: Assignment, held: PlatformSubmission, *, approve: bool) -> None:
    """Refuse a second, contrary decision on work not submitted here (sent from here, or taken on
    the platform itself), and an approval the researcher did not decide (its hold not cleared)."""
    decided = _decided_on_platform(assignment)
    if decided:
        raise PlatformServiceError(
            f"assignment {assignment.pk}: its work on {held.publication.platform} ({held.platform_assignment_id}) was "
            f"already {decided} from here; the task here stays {assignment.get_status_display().lower()}")
    there = _decided_there(held)
    if there:
        raise PlatformServiceError(
            f"assignment {assignment.pk}: {held.publication.platform} lists its work ({held.platform_assignment_id}) "
            f"as {there} already (platform status {held.platform_status!r} at the last sync), decided on the platform "
            f"itself; nothing was sent. The task here stays {assignment.get_status_display().lower()} and its "
            "answers do not count")
    if approve and (held.flag != PlatformSubmission.Flag.NOT_SUBMITTED_HERE or held.cleared_at is None):
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {assignment.get_status_display().lower()} here, though "
            f"{held.publication.platform} lists its work as submitted (sync: {held.get_flag_display()!r}): it is not "
            "approved until you clear its hold (Platform submissions) after reading its answers; or reject it")


def _not_here_decided(held: PlatformSubmission, *, user) -> None:
    """Date a researcher's approval of work not submitted here on its platform row, where a
    cleared hold is dated (the task here keeps its status). Never for a rejection: it leaves the
    hold in place (``NOT_SUBMITTED_HERE_STATUSES``)."""
    with transaction.atomic():
        locked = PlatformSubmission.objects.select_for_update().get(pk=held.pk)
        if locked.cleared_at is None:
            locked.cleared_at, locked.cleared_by = timezone.now(), actor(user)
            locked.save(update_fields=["cleared_at", "cleared_by"])


def _hold_clear_set(held: PlatformSubmission, cleared: tuple | None) -> tuple | None:
    """Set the clear of ``held``'s hold, under its row lock, to ``cleared`` ((when, by whom); None:
    held again), and recount its work's units when that changes whether it counts. Returns the
    clear it had (None: it was held). Used around a rejection of work not submitted here: the hold
    a researcher cleared is put back before the rejection is sent (``_hold_restored``: a task the
    worker finishes here afterwards stays held, not counted, never in "Approve all", until sync
    takes the rejection over), and given back, who and when, when nothing was rejected
    (``_clear_given_back``)."""
    with transaction.atomic():
        locked = PlatformSubmission.objects.select_for_update().get(pk=held.pk)
        if cleared is not None and cleared[1] is not None and not (
                get_user_model().objects.select_for_update().filter(pk=cleared[1]).exists()):
            # The account that cleared it was deleted while its clear was taken back (nothing kept it
            # then): the clear is given back without who, rather than naming a row that is gone. The
            # account's row, when there, stays locked until the clear is written back (and PROTECTs it).
            cleared = (cleared[0], None)
        had = (locked.cleared_at, locked.cleared_by_id) if locked.cleared_at is not None else None
        if (had is None) != (cleared is None):
            locked.cleared_at, locked.cleared_by_id = cleared if cleared is not None else (None, None)
            locked.save(update_fields=["cleared_at", "cleared_by"])
            if locked.assignment_id is not None:  # whether its work counts changed: so does ``n_completed``
                units_recount_completed(assignment_ids=[locked.assignment_id])
        return had


def _hold_restored(held: PlatformSubmission) -> tuple | None:
    """Put the hold back; the clear it took back (when, by whom), None when it was not cleared."""
    return _hold_clear_set(held, None)


def _clear_given_back(held: PlatformSubmission, cleared: tuple) -> None:
    """Give back the clear ``_hold_restored`` took: nothing was rejected, the decision stands."""
    _hold_clear_set(held, cleared)


def _clear_noted(key: str, cleared: tuple | None) -> dict:
    """What the rejection's audit row (idempotency ``key``) keeps of the clear ``_hold_restored``
    took for it (``cleared_at`` ISO, ``cleared_by`` user id; empty when none was taken), written on
    a row left by an earlier attempt too (refused or found not applied: sent again), whose summary
    its creation fixed."""
    taken = {"cleared_at": cleared[0].isoformat(), "cleared_by": cleared[1]} if cleared is not None else {}
    with transaction.atomic():
        row = PlatformCall.objects.select_for_update().filter(idempotency_key=key).first()
        if row is not None and row.status == PlatformCall.Status.FAILED:
            summary = {k: v for k, v in (row.request_summary or {}).items() if k not in ("cleared_at", "cleared_by")}
            row.request_summary = {**summary, **taken}
            row.save(update_fields=["request_summary", "updated_at"])
    return taken


def reject_not_applied(call: PlatformCall) -> None:
    """Sync found that the rejection ``call``, whose answer was lost, was never applied: the clear
    its sending took back (``_clear_noted``) is given back, who and when, as for a rejection
    refused outright. Never for a rejection confirmed: the hold stays for sync to take it over (one
    that answers applied after this, ``payments.LATE_CONFIRMED``, puts it back:
    ``reject_confirmed_late``)."""
    summary = call.request_summary or {}
    if call.operation != OP.REJECT or call.assignment_id is None or not summary.get("cleared_at"):
        return
    held = submitted_not_here(Assignment.objects.get(pk=call.assignment_id))
    if held is None:
        return
    when = datetime.fromisoformat(summary["cleared_at"])
    _clear_given_back(held, (when, summary.get("cleared_by")))


def reject_confirmed_late(sender, *, call: PlatformCall, **kwargs) -> None:
    """A rejection ``call`` that sync had marked not applied (``reject_not_applied`` gave the
    researcher's clear back) answered applied after all (``payments.call_confirmed_late``, sent in the
    transaction that confirms it): the work not submitted here was rejected, so its hold is put back
    as ``assignment_reject`` keeps it (``_hold_restored``), in that transaction: the rejected work
    counts no more, nor is offered to "Approve all", until sync takes the rejection over."""
    if call.operation != OP.REJECT or call.assignment_id is None:
        return
    held = submitted_not_here(Assignment.objects.get(pk=call.assignment_id))
    if held is not None:
        _hold_restored(held)


def assignment_approve(*, user, study: Study, assignment: Assignment, feedback: str = "") -> Assignment:
    """Approve submitted work of ``study`` (and so pay its reward) as ``user``, who needs PAY
    access to the study (``access.access_study``). Approving twice sends nothing twice."""
    study = access_study(user=user, study=study, access=APPROVE)
    return _approve(assignment_of(study=study, assignment=assignment), user=user, feedback=feedback, one_task=True)


def _approve(assignment: Assignment, *, user, feedback: str = "", one_task: bool = False) -> Assignment:
    """Approve ``assignment``, whose study's access the caller checked. Work the platform lists as
    submitted whose task here is not is approved only ``one_task`` at a time (never in a batch),
    once a researcher cleared its hold (``submission_clear``); its task keeps its status here."""
    if assignment.status == Assignment.Status.APPROVED:
        return assignment
    held = submitted_not_here(assignment) if one_task else None
    if held is None:
        _check_reviewable(assignment)
    else:
        _check_not_here_decidable(assignment, held, approve=True)
    _check_on_hold(assignment)
    platform_work_confirm(assignment)
    _lock_undecided(assignment, operation=OP.APPROVE)
    name = assignment_platform(assignment)
    if name != Platform.LINK:
        platform = get_platform(name)
        platform_call_execute(
            spec=CallSpec(platform=name, operation=OP.APPROVE,
                          idempotency_key=review_key(name, OP.APPROVE, assignment),
                          amount=money(assignment.study.reward), currency=platform.currency,
                          request_summary={"platform_assignment_id": assignment.platform_assignment_id,
                                           "worker": participant_pseudonym(assignment.participant)},
                          user=actor(user), study=assignment.study, assignment=assignment,
                          redact=participant_redaction(assignment.participant)),
            send=lambda: platform.approve(platform_assignment_id=assignment.platform_assignment_id, feedback=feedback),
            reconcile=reconciler(platform),
            guard=lambda: _contrary_refusal(assignment, operation=OP.APPROVE),
        )
    if held is not None:
        _not_here_decided(held, user=user)
    assignment_reviewed(assignment.pk, approved=True)
    assignment.refresh_from_db()
    return assignment


# The holds sync puts on work because the platform's listing says its platform assignment id is
# not the work of the task's worker: the listing lacks it (``NOT_ON_PLATFORM``: an id made up at the
# entry link, another study's, or one whose listed row is a withdrawn worker's), or lists it as
# another worker's (``WORKER_MISMATCH``).
NOT_THE_WORKERS_LISTING = (PlatformSubmission.Flag.NOT_ON_PLATFORM, PlatformSubmission.Flag.WORKER_MISMATCH)


def _listed_as_not_theirs(assignment: Assignment) -> bool:
    """Whether sync holds ``assignment``'s work because its platform's listing says the platform
    assignment id is not its worker's work (``NOT_THE_WORKERS_LISTING``), cleared or not."""
    return PlatformSubmission.objects.filter(
        assignment=assignment, platform_assignment_id=assignment.platform_assignment_id,
        publication__platform=assignment_platform(assignment), publication__dry_run=False,
        flag__in=NOT_THE_WORKERS_LISTING).exists()


def _lock_here_only(assignment: Assignment) -> None:
    """``_lock_undecided`` for a rejection here only: under the task's row lock, refuse
    (``PlatformServiceError``) while an approval of this very task was sent from here (its answer
    lost, or confirmed: it may have paid the worker). The contrary rule by review key
    (``contrary_sent``) is not read: that key is the platform id's, which this task shares with
    another worker's work (a session whose worker withdrew after its approval was confirmed), and
    a rejection here only sends nothing under it."""
    with transaction.atomic():
        try:
            locked = lock(assignment)
        except Assignment.DoesNotExist:
            raise PlatformServiceError(f"assignment {assignment.pk} no longer exists (its worker withdrew or it was "
                                       "deleted): nothing was rejected") from None
        approved = PlatformCall.objects.filter(
            assignment_id=locked.pk, operation=OP.APPROVE,
            status__in=[PlatformCall.Status.SENT, PlatformCall.Status.CONFIRMED]).exists()
    if approved:
        raise PlatformServiceError(
            f"assignment {assignment.pk}: its approval was sent to {assignment_platform(assignment)} from here (its "
            "outcome not recorded yet, or confirmed): nothing was rejected")


def _reject_here_only(assignment: Assignment, *, user, why: str, summary: dict) -> Assignment:
    """Reject work held because the platform's listing says its id is not its worker's
    (``_listed_as_not_theirs``) that the platform answers is not this task's work (``why``: it has
    no such submission, files the id under another study, or as another worker's work): there is
    nothing of this task's worker to reject there, and the id may be another study's submission or
    another participant's, so nothing is sent. The refusal is kept on an audit row of its own
    (``PlatformCall``, failed: not applied; keyed by this task, never by the review key, which every
    task entered with that id shares), and the task is rejected here (``assignment_reviewed``: its
    unit slots are given back). Run again, it finds the task rejected and does nothing."""
    name = assignment_platform(assignment)
    refusal = (f"{why}. Nothing to reject on {name}: task {assignment.pk} was rejected here only and its unit slots "
               "given back")
    try:
        platform_call_execute(
            spec=CallSpec(platform=name, operation=OP.REJECT,
                          idempotency_key=f"{review_key(name, OP.REJECT, assignment)}:here-only:{assignment.pk}",
                          request_summary={**summary, "rejected_here_only": True}, user=actor(user),
                          study=assignment.study, assignment=assignment,
                          redact=participant_redaction(assignment.participant)),
            send=lambda: {},  # never called: the guard refuses, so the refusal is recorded and nothing is sent
            guard=lambda: refusal,
        )
    except PlatformServiceError as exc:
        if exc.message != refusal:
            raise
    assignment_reviewed(assignment.pk, approved=False)
    assignment.refresh_from_db()
    return assignment


def assignment_reject(*, user, study: Study, assignment: Assignment, feedback: str,
                      category: str = "") -> Assignment:
    """Reject submitted work of ``study`` as ``user`` (PAY access), with the reason the worker
    will read (MTurk requires it; Prolific needs at least 100 characters and a category). Work the
    platform lists as submitted whose task here is active, returned or expired
    (``submitted_not_here``) is rejected on the platform all the same, held or cleared; its task
    keeps its status here, the decision is its ``PlatformCall`` (the worker's page offers it no
    more), and its hold stays (a hold the researcher cleared is put back first): an active task the worker finishes here afterwards is not counted,
    nor offered to "Approve all", and the next sync takes the rejection over.

    Work sync holds because the platform's listing says its id is not its worker's
    (``NOT_THE_WORKERS_LISTING``: unknown to the platform, as an id made up at the entry link or
    another study's, or listed as another worker's, as a session entered by someone else) that the
    platform answers is not this task's work (not found, another study's, or another worker's:
    ``common.NotThisTasksWork``) is rejected here only (``_reject_here_only``): nothing is sent (the
    id may be another participant's submission), its unit slots are given back. Any other refusal
    by the platform is a ``PlatformServiceError``, a not-found included."""
    study = access_study(user=user, study=study, access=REJECT)
    assignment = assignment_of(study=study, assignment=assignment)
    if assignment.status == Assignment.Status.REJECTED:
        return assignment
    held = submitted_not_here(assignment)
    if held is None:
        _check_reviewable(assignment)
    else:
        _check_not_here_decidable(assignment, held, approve=False)
    feedback = (feedback or "").strip()
    if not feedback:
        raise PlatformServiceError("a rejection needs feedback: tell the worker why their work was rejected")
    name = assignment_platform(assignment)
    if name == Platform.PROLIFIC:
        category = category or "FAILED_CHECK"
        if category not in REJECTION_CATEGORIES:
            raise PlatformServiceError(f"rejection category {category!r} is not one of {', '.join(REJECTION_CATEGORIES)}")
        if len(feedback) < MIN_REJECTION_MESSAGE:
            raise PlatformServiceError(
                f"Prolific needs a rejection message of at least {MIN_REJECTION_MESSAGE} characters; this one has "
                f"{len(feedback)}: explain what went wrong in more detail"
            )
    summary = {"platform_assignment_id": assignment.platform_assignment_id,
               "worker": participant_pseudonym(assignment.participant), "feedback": feedback[:1024],
               "category": category}
    unlisted = _listed_as_not_theirs(assignment)
    try:
        platform_work_confirm(assignment)
    except NotThisTasksWork as exc:
        if not unlisted:
            raise
        _lock_here_only(assignment)
        return _reject_here_only(assignment, user=user, why=exc.message, summary=summary)
    _lock_undecided(assignment, operation=OP.REJECT)
    cleared = _hold_restored(held) if held is not None else None
    if name != Platform.LINK:
        platform = get_platform(name)
        key = review_key(name, OP.REJECT, assignment)
        # The clear taken back rides on the rejection's audit row: when its answer is lost and sync
        # finds it not applied, ``reject_not_applied`` gives it back.
        taken = _clear_noted(key, cleared)
        try:
            platform_call_execute(
                spec=CallSpec(platform=name, operation=OP.REJECT, idempotency_key=key,
                              request_summary={**summary, **taken},
                              user=actor(user), study=assignment.study, assignment=assignment,
                              redact=participant_redaction(assignment.participant)),
                send=lambda: platform.reject(platform_assignment_id=assignment.platform_assignment_id,
                                             feedback=feedback, category=category),
                reconcile=reconciler(platform),
                guard=lambda: _contrary_refusal(assignment, operation=OP.REJECT),
            )
        except (PlatformTransientError, CallOutcomeUnknown):
            raise  # it may have gone through: the hold stays until sync knows
        except PlatformNotFound as exc:  # nothing was rejected: the platform has no such submission
            if cleared is not None:
                _clear_given_back(held, cleared)
            why = (f"assignment {assignment.pk}: {name} has no submission under its assignment id to reject "
                   f"({exc.message})")
            if unlisted:
                return _reject_here_only(assignment, user=user, why=why, summary=summary)
            raise PlatformServiceError(f"{why}: nothing was rejected; sync the study to see what {name} lists") from exc
        except Exception:
            if cleared is not None:  # refused outright: nothing was rejected, the researcher's clear stands
                _clear_given_back(held, cleared)
            raise
    assignment_reviewed(assignment.pk, approved=False)
    assignment.refresh_from_db()
    return assignment


def study_approve_all(*, user, study: Study, assignment_ids: list[int] | None = None) -> dict:
    """Approve, as ``user`` (PAY access), every submitted assignment of ``study``, or those of
    ``assignment_ids`` (an id of another study's task refuses the batch: nothing is done). The
    one "approve all": the publish page runs it inline and ``approve_assignments_task`` runs it
    per batch. No single assignment stops the batch: a refusal, or an id that no longer exists (a
    worker who withdrew after the batch was queued), is collected in ``errors`` with the
    assignment's id (and a refusal recorded on its audit row); one whose outcome is not known yet
    (a network error, an earlier attempt's lost answer) is in ``errors`` and its id in
    ``unsettled``, for a retry or the next sync."""
    study = access_study(user=user, study=study, access=APPROVE)
    gone: list[str] = []
    if assignment_ids is None:
        assignments = list(Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED)
                           .select_related("participant", "study").order_by("id"))
    else:
        assignments, gone = study_assignments(study=study, ids=assignment_ids)
    ended = ended_on_platform_cleared(study=study)

    def approve(assignment: Assignment) -> Assignment:
        if assignment.pk in ended:
            raise PlatformServiceError(
                f"assignment {assignment.pk}: {ended[assignment.pk]} lists its session as timed out or returned "
                "(sync: ended_on_platform), so it is never approved in a batch: approve it on its own on the "
                "worker's page where the platform still takes an approval, or pay the worker a bonus")
        return _approve(assignment, user=user)

    approved, errors, unsettled = each_assignment(assignments, approve, user=user, access=APPROVE)
    return {"approved": approved, "errors": gone + errors, "unsettled": unsettled}


