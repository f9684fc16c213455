"""Reviewing submitted work: approve (pays the reward) and reject (with the reason the worker
reads), one at a time or every submitted assignment of a study."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from annotations.models import Assignment, PlatformSubmission
from annotations.platforms import get_platform
from annotations.platforms.base import money
from annotations.platforms.prolific import MIN_REJECTION_MESSAGE, REJECTION_CATEGORIES
from annotations.selectors import HOLDING_FLAGS
from annotations.selectors.platforms import assignments_on_hold
from annotations.services.payments import (
    CallSpec,
    PlatformServiceError,
    platform_call_execute,
)
from annotations.services.release import assignment_release, units_recount_completed
from annotations.services.stopping import unit_decide_for_assignment
from studies.models import Platform, Study

from .access import APPROVE, REJECT, access_study, assignment_of, study_assignments
from .calls import reconciler
from .common import (
    OP,
    actor,
    assignment_platform,
    each_assignment,
    participant_pseudonym,
    participant_redaction,
    platform_work_confirm,
)


def assignment_reviewed(assignment_id: int, *, approved: bool) -> bool:
    """Record the review outcome locally (after the platform confirmed it, or as sync found it),
    through ``Assignment.STATUS``: approved work stays counted; rejected work gives its unit slots
    back (``release.assignment_release``), so the units take other workers. Returns whether the
    assignment moved (False: already there, or withdrawn by its participant)."""
    assignment = Assignment.objects.get(pk=assignment_id)
    if assignment.status == Assignment.Status.WITHDRAWN:
        return False  # its participant withdrew: a late platform outcome changes nothing here
    if not approved:
        return assignment_release(assignment=assignment, status=Assignment.Status.REJECTED,
                                  reviewed_at=timezone.now())
    with transaction.atomic():
        locked = Assignment.objects.select_for_update().get(pk=assignment_id)
        return Assignment.STATUS.move(locked, Assignment.Status.APPROVED, reviewed_at=timezone.now())


def submission_clear(*, user, submission: PlatformSubmission) -> PlatformSubmission:
    """A researcher's decision on work that sync put on hold (``HOLDING_FLAGS``: the platform's
    worker id is not the local participant's, or the platform does not list the work), as
    ``user`` (PAY access to its study): the work counts again and may be approved and paid. To
    refuse it, reject the assignment instead."""
    submission = PlatformSubmission.objects.select_related("publication").get(pk=submission.pk)
    access_study(user=user, study=submission.publication.study_id, access=APPROVE)
    with transaction.atomic():
        locked = PlatformSubmission.objects.select_for_update().get(pk=submission.pk)
        if locked.flag not in HOLDING_FLAGS:
            raise PlatformServiceError(
                f"submission {locked.platform_assignment_id} is not on hold (sync holds only work whose "
                "platform worker is someone else, or work the platform does not list)")
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
    if assignment.status != Assignment.Status.SUBMITTED:
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {assignment.get_status_display().lower()}, not submitted: only "
            "submitted work can be approved or rejected"
        )


def assignment_approve(*, user, study: Study, assignment: Assignment, feedback: str = "") -> Assignment:
    """Approve submitted work of ``study`` (and so pay its reward) as ``user``, who needs PAY
    access to the study (``access.access_study``). Approving twice sends nothing twice."""
    study = access_study(user=user, study=study, access=APPROVE)
    return _approve(assignment_of(study=study, assignment=assignment), user=user, feedback=feedback)


def _approve(assignment: Assignment, *, user, feedback: str = "") -> Assignment:
    """Approve ``assignment``, whose study's access the caller checked."""
    if assignment.status == Assignment.Status.APPROVED:
        return assignment
    _check_reviewable(assignment)
    _check_on_hold(assignment)
    platform_work_confirm(assignment)
    name = assignment_platform(assignment)
    if name != Platform.LINK:
        platform = get_platform(name)
        platform_call_execute(
            spec=CallSpec(platform=name, operation=OP.APPROVE,
                          idempotency_key=f"{name}:approve:{assignment.platform_assignment_id}",
                          amount=money(assignment.study.reward), currency=platform.currency,
                          request_summary={"platform_assignment_id": assignment.platform_assignment_id,
                                           "worker": participant_pseudonym(assignment.participant)},
                          user=actor(user), study=assignment.study, assignment=assignment,
                          redact=participant_redaction(assignment.participant)),
            send=lambda: platform.approve(platform_assignment_id=assignment.platform_assignment_id, feedback=feedback),
            reconcile=reconciler(platform),
        )
    assignment_reviewed(assignment.pk, approved=True)
    assignment.refresh_from_db()
    return assignment


def assignment_reject(*, user, study: Study, assignment: Assignment, feedback: str,
                      category: str = "") -> Assignment:
    """Reject submitted work of ``study`` as ``user`` (PAY access), with the reason the worker
    will read (MTurk requires it; Prolific needs at least 100 characters and a category)."""
    study = access_study(user=user, study=study, access=REJECT)
    assignment = assignment_of(study=study, assignment=assignment)
    if assignment.status == Assignment.Status.REJECTED:
        return assignment
    _check_reviewable(assignment)
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
    platform_work_confirm(assignment)
    if name != Platform.LINK:
        platform = get_platform(name)
        platform_call_execute(
            spec=CallSpec(platform=name, operation=OP.REJECT,
                          idempotency_key=f"{name}:reject:{assignment.platform_assignment_id}",
                          request_summary={"platform_assignment_id": assignment.platform_assignment_id,
                                           "worker": participant_pseudonym(assignment.participant),
                                           "feedback": feedback[:1024], "category": category},
                          user=actor(user), study=assignment.study, assignment=assignment,
                          redact=participant_redaction(assignment.participant)),
            send=lambda: platform.reject(platform_assignment_id=assignment.platform_assignment_id,
                                         feedback=feedback, category=category),
            reconcile=reconciler(platform),
        )
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
    approved, errors, unsettled = each_assignment(assignments, lambda assignment: _approve(assignment, user=user),
                                                  user=user, access=APPROVE)
    return {"approved": approved, "errors": gone + errors, "unsettled": unsettled}
