"""Money moves only for work the platform files under the study's own task. A worker sends the
platform's assignment id at the entry, where nothing can prove it: Bob's Prolific session (or MTurk
assignment) id is as well formed as one of Alice's, and approving, rejecting or paying acts on that
id across the whole requester account. So a worker who entered Alice's study with the id of work
they did for Bob must not make Alice's "Approve" approve Bob's work, her "Reject" reject it, or her
bonus pay it. ``platform_work_confirm`` asks the platform whose the id is unless sync already listed
it under the study's own publication. The state is made as the app makes it: studies published
through the services, workers entering through the HTTP pages with the ids the platform sends."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from annotations.models import Assignment, Bonus, PlatformCall
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, assignment_reject, study_approve_all
from annotations.services.platforms.sync import study_sync
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, start
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, owner_answer, published, sync_page
from tests.cockpit.conftest import staff_client

PID, OTHER_PID = "5a9d64f5f6dfdd0001eaa73d", "5a9d64f5f6dfdd0001eaa73e"
FEEDBACK = "The answers do not match the questions asked; " * 3


def _prolific_study(owner, name: str):
    study = make_study(platform="prolific", n_items=4, n_sources=1, units_per_task=2, status="draft", reward=2,
                       owner=owner, name=name)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id


def _work(study, prolific_study_id: str, session: str, pid: str = PID) -> Assignment:
    """A worker enters ``study`` from Prolific with ``session`` as SESSION_ID, answers and submits."""
    client = Client()
    task = start(client, entry_url(study, PROLIFIC_PID=pid, STUDY_ID=prolific_study_id, SESSION_ID=session))
    complete_task(client, task)
    assert client.post(task + "submit").status_code == 302
    return Assignment.objects.get(study=study, platform_assignment_id=session)


def test_a_prolific_session_of_another_researchers_study_is_not_reviewed_or_paid_from_this_one(prolific, db):
    platform, server = prolific
    alice, bob = staff_client("alice")[0], staff_client("bob")[0]
    hers, her_prolific = _prolific_study(alice, "alice-prolific")
    _, his_prolific = _prolific_study(bob, "bob-prolific")
    # The worker's real session is in Bob's Prolific study; they enter Alice's study with its id.
    session = server.add_submission(his_prolific, participant_id=PID)["id"]
    work = _work(hers, her_prolific, session)

    for act in (
        lambda: assignment_approve(user=alice, study=hers, assignment=work),
        lambda: assignment_reject(user=alice, study=hers, assignment=work, feedback=FEEDBACK),
        lambda: bonus_pay(user=alice, study=hers, assignment=work, amount=Decimal("0.50"), reason="Thanks."),
    ):
        with pytest.raises(PlatformServiceError, match="not this study's"):
            act()
    result = study_approve_all(user=alice, study=hers)

    assert result["approved"] == 0 and "not this study's" in result["errors"][0]
    assert server.submissions[session]["status"] == "AWAITING REVIEW"  # Bob's work: untouched
    assert server.calls("POST", r"/api/v1/submissions/.*") == [] and server.payments == []
    assert not PlatformCall.objects.filter(operation__in=["approve", "reject", "bonus", "bonus_setup"]).exists()
    assert Bonus.objects.get().status == Bonus.Status.FAILED and "not this study's" in Bonus.objects.get().error
    assert Assignment.objects.get(pk=work.pk).status == Assignment.Status.SUBMITTED

    # Alice's own worker's session in her own study is approved, and paid, as before.
    own = _work(hers, her_prolific, server.add_submission(her_prolific, participant_id=OTHER_PID)["id"],
                pid=OTHER_PID)
    assignment_approve(user=alice, study=hers, assignment=own)
    assert server.submissions[own.platform_assignment_id]["status"] == "APPROVED"
    assert bonus_pay(user=alice, study=hers, assignment=own, amount=Decimal("0.50"),
                     reason="Thanks.").status == Bonus.Status.PAID


def test_a_prolific_session_another_worker_holds_is_not_paid(prolific, db):
    platform, server = prolific
    alice = staff_client("alice")[0]
    hers, her_prolific = _prolific_study(alice, "alice-prolific")
    session = server.add_submission(her_prolific, participant_id=OTHER_PID)["id"]  # someone else's session
    work = _work(hers, her_prolific, session, pid=PID)

    with pytest.raises(PlatformServiceError, match="another worker holds"):
        assignment_approve(user=alice, study=hers, assignment=work)
    assert server.submissions[session]["status"] == "AWAITING REVIEW"

    # Sync finds the mismatch too and puts the work on hold; only clearing the hold would pay it.
    study_sync(study=hers)
    with pytest.raises(PlatformServiceError, match="on hold"):
        assignment_approve(user=alice, study=hers, assignment=work)


def test_an_mturk_assignment_of_another_studys_hit_is_not_approved(mturk, db):
    platform, stubber = mturk
    alice = staff_client("alice")[0]
    hers = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=alice,
                      name="alice-mturk", status="draft", platform="mturk")
    bobs_hit = "3BOBSHITAAAAAAAAAAAAAAAAAAAAAA"
    published(stubber, hers)  # Alice's HITs: HIT_A and HIT_B
    assignment_id = "3WORKFORBOBAAAAAAAAAAAAAAAAAAA"
    client = Client()
    # MTurk's ExternalQuestion sends these; the worker swapped in the assignment id of Bob's HIT.
    params = {"assignmentId": assignment_id, "hitId": HIT_A, "workerId": "AWORKER",
              "turkSubmitTo": "https://www.mturk.com"}
    task = start(client, entry_url(hers, **params))
    complete_task(client, task)
    assert client.post(task + "submit").status_code == 302
    work = Assignment.objects.get(study=hers)

    stubber.add_response("get_assignment", owner_answer(work, hit_id=bobs_hit),
                         {"AssignmentId": assignment_id})  # no approve_assignment queued: one would fail
    with pytest.raises(PlatformServiceError, match="not this study's"):
        assignment_approve(user=alice, study=hers, assignment=work)
    stubber.assert_no_pending_responses()
    assert Assignment.objects.get(pk=work.pk).status == Assignment.Status.SUBMITTED

    # Once sync lists it under one of the study's own HITs, nothing more is asked before paying.
    for hit_id in (HIT_A, HIT_B):
        listed = [{"AssignmentId": assignment_id, "WorkerId": "AWORKER", "HITId": hit_id,
                   "AssignmentStatus": "Submitted"}] if hit_id == HIT_A else []
        stubber.add_response("list_assignments_for_hit", sync_page(listed), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})
    study_sync(study=hers)
    stubber.add_response("approve_assignment", {}, {"AssignmentId": assignment_id})
    assert assignment_approve(user=alice, study=hers, assignment=work).status == Assignment.Status.APPROVED
    stubber.assert_no_pending_responses()
