"""A bonus whose answer was lost is reconciled by asking the platform whether it was paid. An
earlier bonus of the same amount to the same worker on the same assignment shows there too: it is
that bonus's payment, not this one's. The lost bonus is confirmed only where the platform shows
more payments of its amount (on MTurk, with its reason) than the app's other confirmed bonus calls
account for; otherwise it is paid again, and a payment that really went through is never paid
twice."""
from __future__ import annotations

from decimal import Decimal

import pytest
from botocore.stub import ANY

from annotations.models import Bonus, PlatformCall
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import _public_url, publish_on, submitted  # noqa: F401
from tests.annotations.platforms.mturk_stubs import HIT_A, NOW, confirm, published, sync_page

FIRST = "Accepted flag on item 1."
SECOND = "Accepted flag on item 2."
HALF = Decimal("0.50")


# -- Prolific: a submission lists its bonuses' amounts, nothing else ---------------------------
def _prolific_work(prolific, study):
    platform, server = prolific
    pub = publish_on(study, "prolific")
    sub = server.add_submission(pub.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=pub.prolific_study_id)
    first = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=FIRST)
    assert first.status == Bonus.Status.PAID and server.submissions[sub["id"]]["bonus_payments"] == [50]
    return work, sub, first


def _second_lost(platform, study, work, *, paid: bool):
    """The second 0.50 bonus (another reason), its pay call's answer lost: after Prolific paid it
    (``paid``) or before the request left."""
    real = platform.bonus_pay

    def lose_the_answer(**kwargs):
        if paid:
            real(**kwargs)
        raise RuntimeError("worker killed")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus_pay", lose_the_answer)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND)
    return Bonus.objects.get(reason=SECOND)


def test_prolific_second_same_amount_bonus_never_paid_is_paid_on_retry_not_marked_paid(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    work, sub, first = _prolific_work(prolific, study)
    second = _second_lost(platform, study, work, paid=False)

    report = study_sync(study=study)

    second.refresh_from_db()
    assert report.reconciled["failed"] == 1 and report.reconciled["confirmed"] == 0
    assert second.status == Bonus.Status.PENDING  # not "paid" on the strength of the first bonus's 0.50
    assert PlatformCall.objects.get(idempotency_key=f"prolific:bonus:{second.token}").status == "failed"
    again = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND)
    assert again.status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50, 50] and len(server.payments) == 2
    first.refresh_from_db()
    assert first.status == Bonus.Status.PAID


def test_prolific_second_same_amount_bonus_within_settle_time_stays_unknown(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 3600
    work, sub, _ = _prolific_work(prolific, study)
    second = _second_lost(platform, study, work, paid=False)

    report = study_sync(study=study)

    second.refresh_from_db()
    assert report.reconciled["unknown"] == 1 and second.status != Bonus.Status.PAID
    with pytest.raises(CallOutcomeUnknown):  # nothing sent while Prolific may still be paying it
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND)
    assert len(server.payments) == 1


def test_prolific_second_same_amount_bonus_paid_before_the_answer_was_lost_is_confirmed_once(prolific, study,
                                                                                               settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    work, sub, _ = _prolific_work(prolific, study)
    second = _second_lost(platform, study, work, paid=True)

    report = study_sync(study=study)

    second.refresh_from_db()
    assert report.reconciled["confirmed"] == 1 and second.status == Bonus.Status.PAID
    bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND)  # asked again: sends nothing
    assert server.submissions[sub["id"]]["bonus_payments"] == [50, 50] and len(server.payments) == 2


# -- MTurk: list_bonus_payments gives worker, amount and the Reason sent -----------------------
WORKER = "AWORKER"
ASSIGNMENT = "3WORKAAAAAAAAAAAAAAAAAAAAAAAAA"


def _mturk_work(mturk, study):
    platform, stubber = mturk
    publication = published(stubber, study)
    work = submitted(study, platform="mturk", worker_id=WORKER, assignment_id=ASSIGNMENT, task_id=HIT_A)
    confirm(stubber, work)
    stubber.add_response("send_bonus", {}, {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": ASSIGNMENT,
                                            "Reason": FIRST, "UniqueRequestToken": ANY})
    first = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=FIRST)
    assert first.status == Bonus.Status.PAID
    return publication, work


def _mturk_second_lost(platform, stubber, study, work, *, reason: str, kind: str = "other", paid: bool):
    confirm(stubber, work)
    if paid:
        stubber.add_response("send_bonus", {}, {"WorkerId": WORKER, "BonusAmount": "0.50",
                                                "AssignmentId": ASSIGNMENT, "Reason": reason,
                                                "UniqueRequestToken": ANY})
    real = platform.bonus

    def lose_the_answer(**kwargs):
        if paid:
            real(**kwargs)
        raise RuntimeError("worker killed")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus", lose_the_answer)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=reason, kind=kind)
    return Bonus.objects.get(reason=reason, kind=kind)


def _listed(stubber, *reasons):
    stubber.add_response("list_bonus_payments", {"BonusPayments": [
        {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": ASSIGNMENT, "Reason": reason, "GrantTime": NOW}
        for reason in reasons], "NumResults": len(reasons)}, {"AssignmentId": ASSIGNMENT})


def test_mturk_second_same_amount_bonus_never_sent_is_not_confirmed_by_the_first(mturk, study):
    platform, stubber = mturk
    publication, work = _mturk_work(mturk, study)
    second = _mturk_second_lost(platform, stubber, study, work, reason=SECOND, paid=False)

    _listed(stubber, FIRST)  # MTurk lists only the first bonus's 0.50
    for hit_id in publication.hit_ids:
        stubber.add_response("list_assignments_for_hit", sync_page([]), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})
    report = study_sync(study=study)

    second.refresh_from_db()
    assert report.reconciled["failed"] == 1 and second.status == Bonus.Status.PENDING
    confirm(stubber, work)
    stubber.add_response("send_bonus", {}, {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": ASSIGNMENT,
                                            "Reason": SECOND, "UniqueRequestToken": second.token})
    assert bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND).status == "paid"
    stubber.assert_no_pending_responses()  # the retry really sent the second bonus


def test_mturk_same_amount_and_reason_of_another_kind_counts_payments(mturk, study):
    """Two bonuses with the same amount and reason (another kind): MTurk's list cannot tell them
    apart by reason, so the count decides."""
    platform, stubber = mturk
    _, work = _mturk_work(mturk, study)
    second = _mturk_second_lost(platform, stubber, study, work, reason=FIRST, kind="good_work", paid=False)

    confirm(stubber, work)
    _listed(stubber, FIRST)  # one payment: the first bonus's
    stubber.add_response("send_bonus", {}, {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": ASSIGNMENT,
                                            "Reason": FIRST, "UniqueRequestToken": second.token})
    again = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=FIRST, kind="good_work")

    stubber.assert_no_pending_responses()
    assert again.status == Bonus.Status.PAID


def test_mturk_second_same_amount_bonus_that_was_paid_is_confirmed_and_not_sent_again(mturk, study):
    platform, stubber = mturk
    _, work = _mturk_work(mturk, study)
    second = _mturk_second_lost(platform, stubber, study, work, reason=SECOND, paid=True)

    confirm(stubber, work)
    _listed(stubber, FIRST, SECOND)
    again = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND)  # no send_bonus queued

    stubber.assert_no_pending_responses()
    assert again.status == Bonus.Status.PAID and again.pk == second.pk
    call = PlatformCall.objects.get(idempotency_key=f"mturk:bonus:{second.token}")
    assert call.status == "confirmed" and call.attempts == 1


def test_mturk_without_reasons_the_count_of_same_amount_payments_decides(mturk, study):
    platform, stubber = mturk
    _, work = _mturk_work(mturk, study)
    _mturk_second_lost(platform, stubber, study, work, reason=SECOND, paid=True)

    confirm(stubber, work)
    _listed(stubber, "", "")  # two payments of 0.50, no reasons returned: one more than the app accounts for
    bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=SECOND)

    stubber.assert_no_pending_responses()
