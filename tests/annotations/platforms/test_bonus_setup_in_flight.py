"""A Prolific bonus's set-up (it creates a bulk-bonus record and moves no money) that sync meets
while it is still in flight. Sync leaves a set-up sent within ``RL_PROLIFIC_BONUS_SETTLE_SECONDS``
unknown; one it settles as not applied anyway (a window of 0) never leaves the bonus unknown for
good nor crashes the payment: a set-up whose answer is lost puts the bonus back to pending at
once (no pay call was sent), and a set-up that answers after sync settled it is a not-applied
attempt whose record is never paid. Paying again pays the worker exactly once."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from annotations.models import Bonus, PlatformCall
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay, study_bonuses_pay
from annotations.services.platforms.calls import reconcile_call
from annotations.services.platforms.common import OP
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import publish_on, submitted

HALF = Decimal("0.50")


def _work(prolific, study, n: int = 1):
    _platform, server = prolific
    pub = publish_on(study, "prolific")
    out = []
    for i in range(n):
        worker = f"{'abcdef'[i]}" * 24
        sub = server.add_submission(pub.prolific_study_id, participant_id=worker)
        out.append((submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                              task_id=pub.prolific_study_id), sub))
    return out


def test_setup_lost_while_sync_settled_it_puts_the_bonus_back_to_pending(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    [(work, sub)] = _work(prolific, study)

    def slow_then_lost(**kwargs):
        study_sync(study=study)  # a sync while Prolific is slow to answer the set-up
        raise PlatformTransientError("Prolific POST submissions/bonus-payments/: ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(CallOutcomeUnknown):
        patch.setattr(platform, "bonus_setup", slow_then_lost)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    bonus = Bonus.objects.get()
    assert bonus.status == Bonus.Status.PENDING, (bonus.status, bonus.error)
    assert "its set-up's answer was lost and no payment was sent: safe to pay again" in bonus.error
    for _ in range(2):
        study_sync(study=study)
    assert Bonus.objects.get().status == Bonus.Status.PENDING

    paid = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert paid.status == Bonus.Status.PAID
    bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    study_sync(study=study)
    assert server.submissions[sub["id"]]["bonus_payments"] == [50] and len(server.payments) == 1


def test_setup_answering_after_sync_settled_it_is_not_applied_and_the_bonus_is_paid_once(prolific, study,
                                                                                          settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    [(work, sub)] = _work(prolific, study)
    real = platform.bonus_setup

    def slow(**kwargs):
        study_sync(study=study)
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "bonus_setup", slow)
        bonus = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert bonus.status == Bonus.Status.PENDING and "safe to pay again" in bonus.error
    setup = PlatformCall.objects.get(operation=OP.BONUS_SETUP)
    assert setup.status == PlatformCall.Status.FAILED and "never paid" in setup.error
    assert len(server.bulk_bonuses) == 1 and server.payments == []

    paid = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert paid.status == Bonus.Status.PAID
    study_sync(study=study)
    bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert len(server.bulk_bonuses) == 2  # the late record is never paid
    assert server.submissions[sub["id"]]["bonus_payments"] == [50] and len(server.payments) == 1


def test_late_setup_answer_does_not_stop_the_bonus_batch(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    (first, _), (second, sub2) = _work(prolific, study, n=2)
    real = platform.bonus_setup
    raced = []

    def slow_once(**kwargs):
        if not raced:
            raced.append(True)
            study_sync(study=study)
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "bonus_setup", slow_once)
        result = study_bonuses_pay(user=OPERATOR, study=study, assignment_ids=[first.pk, second.pk],
                                   amount=HALF, reason="good")
    assert result["paid"] == 1 and result["unsettled"] == [first.pk]
    assert "was not paid" in result["errors"][0]
    assert Bonus.objects.get(assignment=first).status == Bonus.Status.PENDING
    assert Bonus.objects.get(assignment=second).status == Bonus.Status.PAID

    again = study_bonuses_pay(user=OPERATOR, study=study, assignment_ids=[first.pk, second.pk],
                              amount=HALF, reason="good")
    assert again == {"paid": 2, "errors": [], "unsettled": []}
    assert len(server.payments) == 2


def test_sync_leaves_a_setup_in_flight_within_its_settle_window(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 3600
    [(work, sub)] = _work(prolific, study)
    real = platform.bonus_setup
    during = {}

    def slow(**kwargs):
        during["reconciled"] = study_sync(study=study).reconciled
        during["status"] = PlatformCall.objects.get(operation=OP.BONUS_SETUP).status
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "bonus_setup", slow)
        bonus = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert during == {"reconciled": {"confirmed": 0, "failed": 0, "unknown": 1}, "status": PlatformCall.Status.SENT}
    assert bonus.status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]

    # Past its window a set-up nobody confirmed is not applied: it is set up again.
    setup = PlatformCall.objects.get(operation=OP.BONUS_SETUP)
    setup.sent_at = timezone.now() - timedelta(seconds=3601)
    assert reconcile_call(platform=platform, call=setup) is False
    setup.sent_at = timezone.now() - timedelta(seconds=60)
    assert reconcile_call(platform=platform, call=setup) is None


def test_an_old_setup_timing_out_after_a_retry_paid_the_bonus_leaves_it_paid_and_the_batch_goes_on(
        prolific, study, settings):
    """Set-up 1 is slow; sync settles it as not applied; the researcher pays again (paid); then
    set-up 1 times out. Its lost answer changes nothing paid (``_bonus_move`` leaves a settled
    bonus), and the batch pays the next worker too."""
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    (first, _), (second, _) = _work(prolific, study, n=2)
    real = platform.bonus_setup
    calls = {"n": 0}

    def slow_then_lost(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            study_sync(study=study)  # settles set-up 1 as not applied: the bonus is pending again
            again = bonus_pay(user=OPERATOR, study=study, assignment=first, amount=HALF, reason="good")
            assert again.status == Bonus.Status.PAID
            raise PlatformTransientError("Prolific POST submissions/bonus-payments/: ReadTimeout")
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "bonus_setup", slow_then_lost)
        outcome = study_bonuses_pay(user=OPERATOR, study=study, assignment_ids=[first.pk, second.pk],
                                    amount=HALF, reason="good")

    assert Bonus.objects.get(assignment=first).status == Bonus.Status.PAID
    assert Bonus.objects.get(assignment=second).status == Bonus.Status.PAID
    assert len(server.payments) == 2, outcome
