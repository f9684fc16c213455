"""A worker who withdrew from an MTurk study is not one of its workers any more: "notify workers"
does not message them, and a block refuses them with the reason, by the one rule every page and
the API use (``selectors.review.study_participants`` / ``study_tasks``). Their approved task stays
as an emptied ``withdrawn`` task for the payment audit; before, ``workers_notify`` read every
participant with a task in the study, so MTurk was asked to message the withdrawn worker, and
``worker_block`` took that emptied task as "took part". Against botocore's Stubber."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, WorkerBlock
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.notify import workers_notify
from annotations.services.platforms.review import assignment_approve
from annotations.services.withdrawal import participant_withdraw
from tests.annotations.platforms.conftest import submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, confirm, published

pytestmark = pytest.mark.django_db


def _withdrawn_after_approval(mturk, study):
    """AGONE's approved work (the approval's call keeps the emptied task) and AKEPT's, then AGONE
    withdraws: (the withdrawn worker's kept task, the staying worker's task)."""
    _platform, stubber = mturk
    published(stubber, study)
    gone = submitted(study, platform="mturk", worker_id="AGONE", assignment_id="3GONE", task_id=HIT_A)
    kept = submitted(study, platform="mturk", worker_id="AKEPT", assignment_id="3KEPT", task_id=HIT_A)
    confirm(stubber, gone)  # the check before money moves, then the approval itself
    stubber.add_response("approve_assignment", {}, {"AssignmentId": "3GONE"})
    assignment_approve(user=OPERATOR, study=study, assignment=gone)
    participant_withdraw(user=OPERATOR, study=study, worker_id="AGONE")
    husk = Assignment.objects.get(pk=gone.pk)
    assert husk.status == Assignment.Status.WITHDRAWN  # kept for the approval's audit row
    return husk, kept


def test_notify_workers_leaves_a_withdrawn_worker_out(mturk, study):
    _platform, stubber = mturk
    _husk, _kept = _withdrawn_after_approval(mturk, study)
    stubber.add_response("notify_workers", {"NotifyWorkersFailureStatuses": []}, {
        "Subject": "New batch", "MessageText": "A new batch is up.", "WorkerIds": ["AKEPT"]})

    result = workers_notify(user=OPERATOR, study=study, subject="New batch", message="A new batch is up.")

    stubber.assert_no_pending_responses()
    assert result["notified"] == 1


def test_notify_workers_named_only_the_withdrawn_worker_messages_nobody(mturk, study):
    _platform, stubber = mturk
    husk, _kept = _withdrawn_after_approval(mturk, study)

    result = workers_notify(user=OPERATOR, study=study, subject="Hello", message="Hello again.",
                            participants=[husk.participant])

    stubber.assert_no_pending_responses()  # no notify_workers call queued: one would fail
    assert result == {"notified": 0}


def test_a_block_refuses_a_worker_who_withdrew_with_the_reason(mturk, study):
    husk, kept = _withdrawn_after_approval(mturk, study)

    with pytest.raises(PlatformServiceError, match="withdrew from study"):
        worker_block(user=OPERATOR, study=study, participant=husk.participant, reason="Spam.")

    assert not WorkerBlock.objects.exists()
    assert worker_block(user=OPERATOR, study=study, participant=kept.participant, reason="Spam.").pk  # others as before
