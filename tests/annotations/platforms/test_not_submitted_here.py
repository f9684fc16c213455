"""Work a platform lists as submitted (Prolific AWAITING REVIEW, an MTurk assignment posted to
externalSubmit by hand) whose task here is active, returned or expired: sync holds it
(``NOT_SUBMITTED_HERE``), "Approve all" never pays it, the researcher may reject it, or clear its
hold and approve that one task; the task keeps its status here either way."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db.models import ProtectedError

from annotations.models import Annotation, Assignment, PlatformCall, PlatformSubmission
from annotations.selectors import HOLDING_FLAGS, claims_that_count
from annotations.selectors.platforms import assignments_on_hold
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import (
    assignment_approve,
    assignment_reject,
    study_approve_all,
    submission_clear,
)
from annotations.services.platforms.sync import study_sync
from annotations.services.release import assignment_expire_stale, assignment_return
from annotations.services.steps import steps_for
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import _public_url, publish_on, start_assignment, submitted  # noqa: F401
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, published, remote, sync_page

FLAG = PlatformSubmission.Flag.NOT_SUBMITTED_HERE
WORKER = "a" * 24
REASON = ("Your Prolific submission says you finished, but the task in our app was never submitted: the "
          "questions were left unanswered there.")

ENDS = ["active", "returned", "expired"]


def _one_answer(assignment: Assignment) -> None:
    claim = assignment.claims.select_related("unit__item").order_by("position").first()
    step = steps_for(kind=assignment.study.kind, is_attention_check=bool(claim.attention_check_id))[0]
    annotation_submit(assignment=assignment, claim=claim, step=step, answer="yes")


def _finish_here(assignment: Assignment) -> None:
    """The worker answers every question left and submits the task here."""
    for claim in assignment.claims.select_related("unit__item", "attention_check").order_by("position"):
        for step in steps_for(kind=assignment.study.kind, is_attention_check=bool(claim.attention_check_id)):
            if not Annotation.objects.filter(claim=claim, step=step).exists():
                answer = claim.attention_check.correct_answer if claim.attention_check_id else "yes"
                annotation_submit(assignment=assignment, claim=claim, step=step, answer=answer)
    assignment_submit(assignment=assignment)


def _end(assignment: Assignment, end: str) -> None:
    if end == "returned":
        assignment_return(assignment=assignment)
    elif end == "expired":
        Assignment.objects.filter(pk=assignment.pk).update(expires_at=assignment.created_at)
        assignment_expire_stale()
    assignment.refresh_from_db()
    assert assignment.status == end


def _held_on_prolific(prolific, study, end: str):
    """A Prolific submission AWAITING REVIEW whose task here answered a question and is ``end``."""
    _platform, server = prolific
    publication = publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id=WORKER)
    task = start_assignment(study, platform="prolific", worker_id=WORKER, assignment_id=sub["id"],
                            task_id=publication.prolific_study_id)
    _one_answer(task)
    _end(task, end)
    return server, sub, task


@pytest.mark.parametrize("end", ENDS)
def test_sync_holds_platform_submitted_work_not_submitted_here(prolific, study, end):
    server, sub, task = _held_on_prolific(prolific, study, end)

    report = study_sync(study=study)

    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    assert row.flag == FLAG and row.flag in HOLDING_FLAGS and row.flagged_at is not None
    assert row.assignment_id == task.pk and row.cleared_at is None
    assert report.flagged == 1
    assert report.flags == [{"platform_assignment_id": sub["id"], "worker_id": WORKER, "flag": FLAG}]
    assert "the task here is active, returned or expired" in row.get_flag_display()
    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    task.refresh_from_db()
    assert task.status == end  # sync changes nothing of the task here


@pytest.mark.parametrize("end", ENDS)
def test_approve_all_never_pays_it_even_named_or_cleared(prolific, study, end):
    server, sub, task = _held_on_prolific(prolific, study, end)
    study_sync(study=study)

    outcome = study_approve_all(user=OPERATOR, study=study)
    assert outcome["approved"] == 0
    named = study_approve_all(user=OPERATOR, study=study, assignment_ids=[task.pk])
    assert named["approved"] == 0
    assert f"assignment {task.pk} is {end} here, not submitted" in named["errors"][0]
    assert "never approved with the others" in named["errors"][0]
    submission_clear(user=OPERATOR, submission=PlatformSubmission.objects.get(platform_assignment_id=sub["id"]))
    again = study_approve_all(user=OPERATOR, study=study, assignment_ids=[task.pk])
    assert again["approved"] == 0 and again["errors"]
    assert not server.calls("POST", rf"/api/v1/submissions/{sub['id']}/transition/")
    assert server.submissions[sub["id"]]["status"] == "AWAITING REVIEW"


@pytest.mark.parametrize("end", ENDS)
def test_the_researcher_rejects_it_and_the_task_keeps_its_status(prolific, study, end):
    server, sub, task = _held_on_prolific(prolific, study, end)
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")

    with pytest.raises(PlatformServiceError, match="at least 100 characters"):
        assignment_reject(user=researcher, study=study, assignment=task, feedback="too short")
    result = assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)

    assert result.status == end  # a returned or expired task is not made submitted, nor rejected
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    call = PlatformCall.objects.get(idempotency_key=f"prolific:reject:{sub['id']}")
    assert call.status == PlatformCall.Status.CONFIRMED and call.assignment_id == task.pk
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    assert row.cleared_at is None  # the decision is its call: a rejection never lifts the hold
    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    with pytest.raises(PlatformServiceError, match="already rejected"):
        assignment_approve(user=researcher, study=study, assignment=task)
    report = study_sync(study=study)  # the platform now says rejected: nothing moves here
    row.refresh_from_db()
    task.refresh_from_db()
    assert task.status == end
    if end == "active":  # the worker may still finish it here: it stays held
        assert row.flag == FLAG and report.flagged == 1 and row.cleared_at is None
    else:  # returned or expired: it can never count, nothing is held
        assert row.flag == "" and report.flagged == 0


@pytest.mark.parametrize("end", ENDS)
def test_it_is_approved_only_one_task_at_a_time_after_a_clear(prolific, study, end):
    server, sub, task = _held_on_prolific(prolific, study, end)
    study_sync(study=study)
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])

    with pytest.raises(PlatformServiceError, match="not approved until you clear its hold"):
        assignment_approve(user=OPERATOR, study=study, assignment=task)
    assert server.submissions[sub["id"]]["status"] == "AWAITING REVIEW"
    submission_clear(user=OPERATOR, submission=row)
    result = assignment_approve(user=OPERATOR, study=study, assignment=task)

    assert result.status == end
    assert server.submissions[sub["id"]]["status"] == "APPROVED"
    with pytest.raises(PlatformServiceError, match="already approved"):
        assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REASON)
    study_sync(study=study)
    task.refresh_from_db()
    assert task.status == end


def test_the_impostors_ended_task_is_held_too(prolific, study):
    server, sub, task = _held_on_prolific(prolific, study, "returned")
    Assignment.objects.filter(pk=task.pk).update(ended_as_impostor=True)

    report = study_sync(study=study)

    assert PlatformSubmission.objects.get(platform_assignment_id=sub["id"]).flag == FLAG
    assert report.flagged == 1


def test_work_submitted_here_is_not_held_and_a_returned_earlier_try_does_not_hide_it(db, prolific):
    """A platform id that names a returned task and, after it, a submitted one is the submitted one's."""
    # six questions: after returning a task of three, a full task of three is left for the worker
    # (a task shorter than the returned questions would have made it is refused: assignment.py)
    study = make_study(n_items=6, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                       estimated_minutes_per_task=Decimal("6.0"))
    _platform, server = prolific
    publication = publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id=WORKER)
    first = start_assignment(study, platform="prolific", worker_id=WORKER, assignment_id=sub["id"],
                             task_id=publication.prolific_study_id)
    _one_answer(first)
    _end(first, "returned")
    second = submitted(study, platform="prolific", worker_id=WORKER, assignment_id=sub["id"],
                       task_id=publication.prolific_study_id)

    report = study_sync(study=study)

    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    assert (row.flag, row.assignment_id, report.flagged) == ("", second.pk, 0)
    assert study_approve_all(user=OPERATOR, study=study)["approved"] == 1


def test_no_answers_and_not_submitted_here_may_be_rejected(prolific, study):
    """Nothing answered (``no_answers``, as before) and not submitted here: it can be rejected."""
    _platform, server = prolific
    publication = publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id=WORKER)
    task = start_assignment(study, platform="prolific", worker_id=WORKER, assignment_id=sub["id"],
                            task_id=publication.prolific_study_id)
    study_sync(study=study)
    assert PlatformSubmission.objects.get(platform_assignment_id=sub["id"]).flag == "no_answers"

    assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REASON)

    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE


@pytest.mark.parametrize("end", ENDS)
def test_mturk_work_posted_to_external_submit_by_hand(mturk, study, end):
    """MTurk lists it Submitted (a hand-posted externalSubmit) while the task here is not: held,
    left out of "Approve all", and rejected with the reason MTurk requires."""
    _platform, stubber = mturk
    published(stubber, study)
    assignment_id = "3ASGHANDAAAAAAAAAAAAAAAAAAAAAA"
    task = start_assignment(study, platform="mturk", worker_id="AWORKERHAND", assignment_id=assignment_id,
                            task_id=HIT_A)
    _one_answer(task)
    _end(task, end)
    statuses = ["Submitted", "Approved", "Rejected"]
    stubber.add_response("list_assignments_for_hit", sync_page([remote(assignment_id, "AWORKERHAND")]),
                         {"HITId": HIT_A, "AssignmentStatuses": statuses, "MaxResults": 100})
    stubber.add_response("list_assignments_for_hit", sync_page([]),
                         {"HITId": HIT_B, "AssignmentStatuses": statuses, "MaxResults": 100})

    report = study_sync(study=study)

    stubber.assert_no_pending_responses()
    assert PlatformSubmission.objects.get(platform_assignment_id=assignment_id).flag == FLAG
    assert report.flagged == 1
    assert study_approve_all(user=OPERATOR, study=study)["approved"] == 0
    with pytest.raises(PlatformServiceError, match="needs feedback"):
        assignment_reject(user=OPERATOR, study=study, assignment=task, feedback="  ")
    stubber.add_response("reject_assignment", {}, {"AssignmentId": assignment_id, "RequesterFeedback": REASON})
    assert assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REASON).status == end
    stubber.assert_no_pending_responses()


def test_the_worker_page_offers_to_reject_it_and_approve_it_once_cleared(prolific, study, client):
    server, sub, task = _held_on_prolific(prolific, study, "returned")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    client.force_login(researcher)
    page = f"/admin/studies/study/{study.pk}/workers/{task.participant_id}/"

    shown = client.get(page).content.decode()
    assert f'id="not-submitted-here-{task.pk}"' in shown and f"Task {task.pk} (returned here" in shown
    assert f'value="approve">Approve task {task.pk}' not in shown  # not before its hold is cleared
    held = client.get("/admin/annotations/platformsubmission/?flag__in=worker_mismatch,not_on_platform,"
                      f"not_submitted_here&publication__study__id__exact={study.pk}")
    assert held.status_code == 200 and sub["id"] in held.content.decode()

    client.post(page, {"action": "reject", "assignment": task.pk, "feedback": REASON})

    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    assert f'id="not-submitted-here-{task.pk}"' not in client.get(page).content.decode()
    task.refresh_from_db()
    assert task.status == Assignment.Status.RETURNED


@pytest.mark.parametrize("end", ENDS)
def test_work_the_platform_approves_itself_stays_held_and_shows_it_was_paid(prolific, study, client, end):
    """Prolific approves the held work on its own (auto-approval, its own site): the next sync keeps
    it held as not submitted here, with the platform's APPROVED, so the hold list (Platform
    submissions, ``assignments_on_hold``) still shows work never submitted here that was paid;
    nothing is offered or sent for it any more, and the task keeps its status here."""
    server, sub, task = _held_on_prolific(prolific, study, end)
    study_sync(study=study)
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    held_since = row.flagged_at

    server.submissions[sub["id"]]["status"] = "APPROVED"
    report = study_sync(study=study)

    row.refresh_from_db()
    task.refresh_from_db()
    assert (row.flag, row.platform_status, row.cleared_at) == (FLAG, "APPROVED", None)
    assert row.flagged_at == held_since  # the same hold, kept: not a new one
    assert report.flagged == 1 and report.status_updates == 0 and task.status == end
    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    assert not claims_that_count(study=study).filter(assignment=task).exists()
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    client.force_login(researcher)
    page = client.get(f"/admin/studies/study/{study.pk}/workers/{task.participant_id}/").content.decode()
    assert f'id="not-submitted-here-{task.pk}"' not in page  # decided on the platform: nothing to offer
    submission_clear(user=researcher, submission=row)
    with pytest.raises(PlatformServiceError, match="as approved already"):
        assignment_approve(user=researcher, study=study, assignment=task)
    with pytest.raises(PlatformServiceError, match="as approved already"):
        assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)
    assert not server.calls("POST", rf"/api/v1/submissions/{sub['id']}/transition/")


def test_a_rejection_keeps_an_active_tasks_hold_when_the_worker_finishes_it_here(prolific, study):
    """The researcher rejects the platform's work of a task still active here; the worker then
    finishes it here. It is submitted here but stays held: not counted, never approved by
    "Approve all", until sync takes the platform's rejection over."""
    server, sub, task = _held_on_prolific(prolific, study, "active")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    study_sync(study=study)  # the platform says rejected; the task here is still active: still held

    _finish_here(task)
    task.refresh_from_db()

    assert task.status == Assignment.Status.SUBMITTED
    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    assert not claims_that_count(study=study).filter(assignment=task).exists()
    outcome = study_approve_all(user=OPERATOR, study=study)
    assert outcome["approved"] == 0 and not PlatformCall.objects.filter(operation="approve").exists()
    assert f"assignment {task.pk} is on hold" in outcome["errors"][0]
    study_sync(study=study)  # the platform's rejection taken over: rejected here, its slots given back
    task.refresh_from_db()
    assert task.status == Assignment.Status.REJECTED
    assert not claims_that_count(study=study).filter(assignment=task).exists()


def test_a_rejection_after_a_clear_puts_the_hold_back(prolific, study):
    """The researcher clears the hold (to approve), reads the answers again and rejects instead; the
    worker then finishes the task here. The rejection put the hold back: the work is not counted and
    not in "Approve all" before sync takes the platform's rejection over."""
    server, sub, task = _held_on_prolific(prolific, study, "active")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    submission_clear(user=researcher, submission=row)

    assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)
    _finish_here(task)
    task.refresh_from_db()

    assert task.status == Assignment.Status.SUBMITTED
    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    assert not claims_that_count(study=study).filter(assignment=task).exists()
    assert all(u.n_completed == 0 for u in study.units.filter(claims__assignment=task))
    outcome = study_approve_all(user=OPERATOR, study=study)
    assert outcome["approved"] == 0 and not PlatformCall.objects.filter(operation="approve").exists()
    row.refresh_from_db()
    assert (row.cleared_at, row.cleared_by) == (None, None)


def test_a_hold_is_not_cleared_once_its_work_was_rejected_from_here(prolific, study):
    """Reject, then clear (the admin's bulk "Clear the hold" over every held row): the clear is
    refused, so the rejected work never counts and Approve all never approves it after the rejection."""
    server, sub, task = _held_on_prolific(prolific, study, "active")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)

    with pytest.raises(PlatformServiceError, match="rejected from here; the hold stays"):
        submission_clear(user=researcher, submission=row)
    _finish_here(task)

    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    assert not claims_that_count(study=study).filter(assignment=task).exists()
    assert study_approve_all(user=OPERATOR, study=study)["approved"] == 0
    assert not PlatformCall.objects.filter(operation="approve").exists()


def test_a_rejection_the_platform_refuses_leaves_the_clear_in_place(prolific, study):
    """Nothing was rejected (Prolific answers 404): the researcher's clear, who and when, stands,
    and the task may still be approved on its own."""
    server, sub, task = _held_on_prolific(prolific, study, "returned")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    row = submission_clear(user=researcher, submission=PlatformSubmission.objects.get(platform_assignment_id=sub["id"]))
    cleared = (row.cleared_at, row.cleared_by_id)
    saved = server.submissions.pop(sub["id"])

    with pytest.raises(Exception):  # noqa: B017 - the platform's refusal, whatever its class
        assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)
    server.submissions[sub["id"]] = saved

    row.refresh_from_db()
    assert (row.cleared_at, row.cleared_by_id) == cleared
    assert PlatformCall.objects.get(operation="reject").status == PlatformCall.Status.FAILED
    assert assignment_approve(user=researcher, study=study, assignment=task).status == "returned"
    assert server.submissions[sub["id"]]["status"] == "APPROVED"


def test_who_cleared_a_hold_is_kept_on_it_and_their_account_is_not_deleted(prolific, study):
    """Clearing held work counts it and pays the worker by bonus: who decided it stays on the row
    (``cleared_by`` is PROTECT), though the clear made no platform call of its own."""
    _server, sub, _task = _held_on_prolific(prolific, study, "returned")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("clr", "clr@example.org", "pw")
    row = submission_clear(user=researcher, submission=PlatformSubmission.objects.get(platform_assignment_id=sub["id"]))
    assert not PlatformCall.objects.filter(user=researcher).exists()

    with pytest.raises(ProtectedError):
        researcher.delete()
    row.refresh_from_db()
    assert row.cleared_by_id == researcher.pk
