"""A participant's withdrawal waits for their bonuses to be paid.

A bonus that failed (or is pending, or its outcome unknown) before the worker withdrew could never
be paid afterwards: ``bonus_pay`` refuses a withdrawn task ("bonuses go to submitted or approved
work"), and nothing told anyone the money was owed. ``participant_withdraw`` now refuses, naming
the task, the amount and the status, until the bonus is paid; the workers page shows the refusal."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Assignment, Bonus, Withdrawal
from annotations.platforms.base import PlatformError
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.review import assignment_reject, study_approve_all
from annotations.services.withdrawal import WithdrawalError, participant_withdraw
from tests.annotations.platforms.conftest import prolific, prolific_server, submitted  # noqa: F401
from tests.annotations.test_withdrawal_waits_for_review import leaving_worker

pytestmark = pytest.mark.django_db

REASON = "thanks for the careful work"


def owed(task, status: str = "failed") -> str:
    """How the refusal names ``task``'s bonus of 0.75: its task, amount (in the platform's currency) and status."""
    return f"task {task.pk}: 0.75 {Bonus.objects.get(assignment=task, amount=Decimal('0.75')).currency}, {status}"


def refused_bonus(platform, monkeypatch, *, user, study, task, amount: str = "0.75") -> Bonus:
    """A bonus of ``amount`` on ``task`` that Prolific refuses ("insufficient balance"): failed."""
    def refuse(**kwargs):
        raise PlatformError("insufficient balance")

    with monkeypatch.context() as patched:
        patched.setattr(platform, "bonus_pay", refuse)
        with pytest.raises(PlatformServiceError, match="insufficient balance"):
            bonus_pay(user=user, study=study, assignment=task, amount=amount, reason=REASON)
    bonus = Bonus.objects.get(assignment=task, amount=Decimal(amount))
    assert bonus.status == Bonus.Status.FAILED
    return bonus


@pytest.fixture
def failed_bonus(prolific, monkeypatch):  # noqa: F811
    """(owner, their client, the study on Prolific, the leaving worker's approved task, its bonus
    refused by Prolific ("insufficient balance"), the Prolific client)."""
    platform, server = prolific
    alice, client, study, task = leaving_worker(server)
    assert study_approve_all(user=alice, study=study)["approved"] == 1
    refused_bonus(platform, monkeypatch, user=alice, study=study, task=task)
    return alice, client, study, task, server


def test_a_withdrawal_is_refused_while_a_bonus_failed_and_nothing_is_erased(failed_bonus):
    alice, _client, study, task, _server = failed_bonus

    with pytest.raises(WithdrawalError) as refused:
        participant_withdraw(user=alice, study=study, worker_id="pleaving1")

    message = refused.value.message
    assert owed(task) in message
    assert "pay it again" in message and "Nothing was changed" in message
    # Nothing changed: the task is still approved and keeps its answers and platform reference.
    kept = Assignment.objects.get(pk=task.pk)
    assert kept.status == Assignment.Status.APPROVED
    assert kept.platform_assignment_id == task.platform_assignment_id
    assert kept.claims.exists()
    assert not Withdrawal.objects.filter(study=study).exists()
    assert Bonus.objects.get(assignment=task).status == Bonus.Status.FAILED


def test_the_withdrawal_goes_through_once_the_bonus_is_paid_on_retry(failed_bonus):
    alice, _client, study, task, server = failed_bonus

    bonus = bonus_pay(user=alice, study=study, assignment=task, amount="0.75", reason=REASON)
    assert bonus.status == Bonus.Status.PAID
    assert server.submissions[task.platform_assignment_id]["bonus_payments"] == [75]

    outcome = participant_withdraw(user=alice, study=study, worker_id="pleaving1")

    assert outcome.created and outcome.tasks_ended == 1
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN
    assert Bonus.objects.get(pk=bonus.pk).status == Bonus.Status.PAID  # the payment row is untouched
    # Withdrawing again changes nothing (a paid bonus on the withdrawn task refuses nothing).
    assert not participant_withdraw(user=alice, study=study, worker_id="pleaving1").created


def test_a_pending_bonus_refuses_the_withdrawal_too(failed_bonus):
    alice, _client, study, task, _server = failed_bonus
    Bonus.objects.filter(assignment=task).update(status=Bonus.Status.PENDING)  # e.g. a set-up that paid nothing

    with pytest.raises(WithdrawalError, match=owed(task, "pending")):
        participant_withdraw(user=alice, study=study, worker_id="pleaving1")


def test_the_workers_page_shows_the_refusal_as_a_message(failed_bonus):
    _alice, client, study, task, _server = failed_bonus

    response = client.post(f"/admin/studies/study/{study.pk}/workers/withdraw/",
                           {"way": "worker_id", "who": "pleaving1"}, follow=True)

    page = response.content.decode()
    assert response.status_code == 200
    assert "Nothing was done" in page and owed(task) in page
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.APPROVED


def test_the_api_refuses_with_the_message(failed_bonus):
    _alice, client, study, task, _server = failed_bonus

    response = client.post(f"/api/v1/studies/{study.pk}/withdrawals/", {"worker_id": "pleaving1"},
                           content_type="application/json")

    assert response.status_code == 400
    assert owed(task) in response.content.decode()
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.APPROVED


def test_a_bonus_on_work_rejected_since_no_longer_refuses_the_withdrawal(prolific, monkeypatch):  # noqa: F811
    """The 0.75 failed on submitted work the researcher then rejected: no bonus can be paid on a
    rejected task (and nobody can cancel one), so refusing would hold the erasure for good."""
    platform, server = prolific
    alice, _client, study, task = leaving_worker(server)
    bonus = refused_bonus(platform, monkeypatch, user=alice, study=study, task=task)
    assignment_reject(user=alice, study=study, assignment=task, category="FAILED_CHECK",
                      feedback="The answers did not follow the instructions given on the first page. " * 2)
    with pytest.raises(PlatformServiceError, match="is rejected: bonuses go to submitted or approved work"):
        bonus_pay(user=alice, study=study, assignment=task, amount="0.75", reason=REASON)

    outcome = participant_withdraw(user=alice, study=study, worker_id="pleaving1")

    assert outcome.created
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN
    assert Bonus.objects.get(pk=bonus.pk).status == Bonus.Status.FAILED  # the payment row is untouched


def test_a_failed_bonus_replaced_by_a_paid_one_no_longer_refuses_the_withdrawal(failed_bonus):
    """The 0.75 failed and the researcher paid 0.50 instead (a new bonus, same task and kind):
    paying the 0.75 again would pay the worker twice, so it no longer refuses."""
    alice, _client, study, task, server = failed_bonus
    paid = bonus_pay(user=alice, study=study, assignment=task, amount="0.50", reason=REASON)
    assert paid.status == Bonus.Status.PAID
    assert server.submissions[task.platform_assignment_id]["bonus_payments"] == [50]

    outcome = participant_withdraw(user=alice, study=study, worker_id="pleaving1")

    assert outcome.created and outcome.tasks_ended == 1
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN
    assert set(Bonus.objects.filter(assignment=task).values_list("amount", "status")) == {
        (Decimal("0.75"), Bonus.Status.FAILED), (Decimal("0.50"), Bonus.Status.PAID)}
    assert server.submissions[task.platform_assignment_id]["bonus_payments"] == [50]  # paid once


def test_a_failed_bonus_still_refuses_when_a_bonus_of_another_kind_was_paid(failed_bonus):
    """Only a settled bonus of the same task and kind replaces a failed one."""
    alice, _client, study, task, _server = failed_bonus
    assert bonus_pay(user=alice, study=study, assignment=task, amount="0.50", reason=REASON,
                     kind=Bonus.Kind.GOOD_WORK).status == Bonus.Status.PAID

    with pytest.raises(WithdrawalError, match=owed(task)):
        participant_withdraw(user=alice, study=study, worker_id="pleaving1")


def test_a_failed_bonus_still_refuses_when_a_bonus_for_another_reason_was_paid(failed_bonus):
    """A small bonus paid for something else (same default kind) does not replace the failed one:
    the worker is still owed it (review of 0952701)."""
    alice, _client, study, task, _server = failed_bonus
    assert bonus_pay(user=alice, study=study, assignment=task, amount="0.05",
                     reason="reimbursed the postage").status == Bonus.Status.PAID

    with pytest.raises(WithdrawalError, match=owed(task)):
        participant_withdraw(user=alice, study=study, worker_id="pleaving1")
