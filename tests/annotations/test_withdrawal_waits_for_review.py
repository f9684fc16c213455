"""A participant's withdrawal waits for the review of their submitted work.

Erasing a submitted task that was never reviewed (no bonus or platform call names it, so it was
deleted) left its platform submission waiting for a decision the app could no longer send, and
sync skips a withdrawn worker: the worker went unpaid and nobody was told. ``participant_withdraw``
now refuses, naming the tasks, until they are approved or rejected; the admin's workers page shows
the refusal as a message."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Assignment, Withdrawal
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import study_approve_all
from annotations.services.withdrawal import WithdrawalError, participant_withdraw
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import prolific, prolific_server, submitted  # noqa: F401
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


def leaving_worker(server):
    """(owner, their client, the study on Prolific, worker pleaving1's submitted task not reviewed yet)."""
    alice, client = staff_client("alice")
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=alice,
                       estimated_minutes_per_task=Decimal("6.0"), name="s", platform="prolific")
    publication = study_publish(user=alice, study=study, platform_name="prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id="pleaving1")
    task = submitted(study, platform="prolific", worker_id="pleaving1", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    return alice, client, study, task


@pytest.fixture
def waiting(prolific):  # noqa: F811
    """(owner, their client, the study on Prolific, one worker's submitted task not reviewed yet)."""
    _, server = prolific
    return leaving_worker(server)


def test_a_withdrawal_is_refused_while_a_submitted_task_waits_for_review(waiting):
    alice, _client, study, task = waiting

    with pytest.raises(WithdrawalError, match=rf"task\(s\) {task.pk} .*approve or reject these first"):
        participant_withdraw(user=alice, study=study, worker_id="pleaving1")

    # Nothing changed: the task is still there to be approved, and approving pays it.
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.SUBMITTED
    assert not Withdrawal.objects.filter(study=study).exists()
    assert study_approve_all(user=alice, study=study)["approved"] == 1

    # Once reviewed, the withdrawal goes through as before (the paid task stays, emptied).
    outcome = participant_withdraw(user=alice, study=study, worker_id="pleaving1")
    assert outcome.created and outcome.tasks_ended == 1
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN


def test_the_workers_page_shows_the_refusal_as_a_message(waiting):
    _alice, client, study, task = waiting

    response = client.post(f"/admin/studies/study/{study.pk}/workers/withdraw/",
                           {"way": "worker_id", "who": "pleaving1"}, follow=True)

    page = response.content.decode()
    assert response.status_code == 200
    assert "Nothing was done" in page and f"task(s) {task.pk}" in page and "owed a decision" in page
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.SUBMITTED
