"""A participant's withdrawal waits for the decision on their work the platform lists as submitted
while the task here is not (Prolific AWAITING REVIEW, an MTurk assignment posted to externalSubmit
by hand: sync holds it, ``NOT_SUBMITTED_HERE``).

``participant_withdraw`` refused only tasks submitted here, so it deleted the held work's platform
row and its returned, expired or active task: the submission stayed undecided on the platform and a
later rejection failed ("not found in study ... its worker withdrew"). It now refuses, naming the
tasks, by the worker page's rule (``submitted_not_here_to_decide``), until the researcher rejects
the work, or clears its hold and approves it; then the withdrawal goes through."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, PlatformSubmission, Withdrawal
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve, assignment_reject, submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.services.withdrawal import WithdrawalError, participant_withdraw
from tests.annotations.platforms.conftest import (  # noqa: F401
    _public_url,
    aws_env,
    mturk,
    prolific,
    prolific_server,
    start_assignment,
    study,
)
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, published, remote, sync_page
from tests.annotations.platforms.test_not_submitted_here import (
    ENDS,
    FLAG,
    REASON,
    WORKER,
    _end,
    _held_on_prolific,
    _one_answer,
)

pytestmark = pytest.mark.django_db

REFUSED = r"of this participant are not submitted here, but the platform lists their work as submitted .*reject it, or clear its hold and " \
          r"approve it, on the worker's page first"


def _held_and_synced(prolific, study, end):  # noqa: F811
    server, sub, task = _held_on_prolific(prolific, study, end)
    study_sync(study=study)
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    assert (row.flag, row.platform_status, row.assignment_id) == (FLAG, "AWAITING REVIEW", task.pk)
    return server, sub, task, row


def _refused_and_nothing_changed(study, task, row, end):  # noqa: F811
    with pytest.raises(WithdrawalError, match=rf"task\(s\) {task.pk} \(prolific {row.platform_assignment_id}\) "
                                              + REFUSED):
        participant_withdraw(user=OPERATOR, study=study, worker_id=WORKER)
    assert Assignment.objects.get(pk=task.pk).status == end
    assert PlatformSubmission.objects.filter(pk=row.pk, flag=FLAG).exists()
    assert not Withdrawal.objects.filter(study=study).exists()


@pytest.mark.parametrize("end", ENDS)
def test_held_prolific_work_refuses_the_withdrawal_until_it_is_rejected(prolific, study, end):  # noqa: F811
    server, sub, task, row = _held_and_synced(prolific, study, end)

    _refused_and_nothing_changed(study, task, row, end)

    # The researcher decides on the worker's page's rule, and the decision still reaches Prolific.
    assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REASON)
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    outcome = participant_withdraw(user=OPERATOR, study=study, worker_id=WORKER)
    assert outcome.created and outcome.tasks_ended == 1 and outcome.answers_erased == 1
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN  # its call keeps it
    assert not PlatformSubmission.objects.filter(platform_assignment_id=sub["id"]).exists()


@pytest.mark.parametrize("end", ["returned", "expired"])
def test_held_prolific_work_cleared_and_approved_lets_the_withdrawal_through(prolific, study, end):  # noqa: F811
    server, sub, task, row = _held_and_synced(prolific, study, end)
    submission_clear(user=OPERATOR, submission=row)

    _refused_and_nothing_changed(study, task, row, end)  # cleared is not decided yet: approve it

    assignment_approve(user=OPERATOR, study=study, assignment=task)
    assert server.submissions[sub["id"]]["status"] == "APPROVED"
    outcome = participant_withdraw(user=OPERATOR, study=study, worker_id=WORKER)
    assert outcome.created and outcome.tasks_ended == 1
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN


def test_work_the_platform_decided_itself_does_not_refuse(prolific, study):  # noqa: F811
    """Prolific approved it on its own: the worker's page offers nothing, and nothing waits."""
    server, sub, task, _row = _held_and_synced(prolific, study, "returned")
    server.submissions[sub["id"]]["status"] = "APPROVED"
    study_sync(study=study)

    outcome = participant_withdraw(user=OPERATOR, study=study, worker_id=WORKER)

    assert outcome.created and outcome.tasks_ended == 1


def test_mturk_work_posted_by_hand_refuses_the_withdrawal_until_it_is_rejected(mturk, study):  # noqa: F811
    _platform, stubber = mturk
    published(stubber, study)
    assignment_id = "3ASGHANDAAAAAAAAAAAAAAAAAAAAAA"
    task = start_assignment(study, platform="mturk", worker_id="AWORKERHAND", assignment_id=assignment_id,
                            task_id=HIT_A)
    _one_answer(task)
    _end(task, "returned")
    statuses = ["Submitted", "Approved", "Rejected"]
    stubber.add_response("list_assignments_for_hit", sync_page([remote(assignment_id, "AWORKERHAND")]),
                         {"HITId": HIT_A, "AssignmentStatuses": statuses, "MaxResults": 100})
    stubber.add_response("list_assignments_for_hit", sync_page([]),
                         {"HITId": HIT_B, "AssignmentStatuses": statuses, "MaxResults": 100})
    study_sync(study=study)
    assert PlatformSubmission.objects.get(platform_assignment_id=assignment_id).flag == FLAG

    with pytest.raises(WithdrawalError, match=rf"task\(s\) {task.pk} \(mturk {assignment_id}\) " + REFUSED):
        participant_withdraw(user=OPERATOR, study=study, worker_id="AWORKERHAND")
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.RETURNED

    stubber.add_response("reject_assignment", {}, {"AssignmentId": assignment_id, "RequesterFeedback": REASON})
    assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REASON)
    outcome = participant_withdraw(user=OPERATOR, study=study, worker_id="AWORKERHAND")
    stubber.assert_no_pending_responses()
    assert outcome.created and outcome.tasks_ended == 1
