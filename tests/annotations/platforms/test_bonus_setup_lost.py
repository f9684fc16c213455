"""A Prolific bonus is two calls: set-up (creates a bulk-bonus record, moves no money), then pay.
When the set-up's answer is lost no pay call was sent, so nothing was paid: the bonus goes back to
pending at once (a bonus left unknown by an earlier version goes back when sync settles the set-up
call as not applied). Paying it
again sets up a new record and pays that one: the worker is paid exactly once, never the record
the lost answer named as well."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Bonus, PlatformCall
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.common import OP
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import _public_url, publish_on, submitted  # noqa: F401

HALF = Decimal("0.50")


def _setup_answer_lost(prolific, study):
    """A 0.50 bonus whose set-up reached Prolific (a bulk-bonus record exists there) and whose
    answer was lost: ``CallOutcomeUnknown``, the bonus pending again (no pay call was sent)."""
    platform, server = prolific
    pub = publish_on(study, "prolific")
    sub = server.add_submission(pub.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=pub.prolific_study_id)
    real = platform.bonus_setup

    def lost(**kwargs):
        real(**kwargs)
        raise PlatformTransientError("Prolific POST submissions/bonus-payments/: ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(CallOutcomeUnknown):
        patch.setattr(platform, "bonus_setup", lost)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    bonus = Bonus.objects.get()
    assert bonus.status == Bonus.Status.PENDING  # no pay call was sent: safe to pay again at once
    assert len(server.bulk_bonuses) == 1 and server.payments == []
    assert not PlatformCall.objects.filter(operation=OP.BONUS).exists()
    return work, sub, bonus


def test_prolific_bonus_whose_setup_answer_was_lost_is_pending_after_sync_and_paid_once(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    work, sub, bonus = _setup_answer_lost(prolific, study)

    for _ in range(3):
        study_sync(study=study)
    bonus.refresh_from_db()
    assert bonus.status == Bonus.Status.PENDING, (bonus.status, bonus.error)
    assert "safe to pay again" in bonus.error
    assert PlatformCall.objects.get(operation=OP.BONUS_SETUP).status == PlatformCall.Status.FAILED
    assert server.submissions[sub["id"]]["bonus_payments"] == []

    again = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert again.pk == bonus.pk and again.status == Bonus.Status.PAID
    # A second bulk-bonus record was set up; only the one whose id the app holds was paid.
    assert len(server.bulk_bonuses) == 2
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]
    assert len(server.payments) == 1

    # Paying again, and syncing, pays nothing more.
    bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    study_sync(study=study)
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]
    assert Bonus.objects.get().status == Bonus.Status.PAID


def test_prolific_lost_setup_retried_before_sync_pays_once_and_sync_leaves_it_paid(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    work, sub, bonus = _setup_answer_lost(prolific, study)

    paid = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert paid.status == Bonus.Status.PAID
    study_sync(study=study)
    assert Bonus.objects.get().status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]


def test_setup_settled_failed_leaves_an_unknown_bonus_whose_pay_call_was_sent_unknown(prolific, study, settings):
    """The bonus goes back to pending only when no pay call of its token was sent: one whose pay
    call's answer was lost stays unknown for that call's own reconciliation."""
    from annotations.services.platforms.bonus import bonus_reconciled

    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 3600
    pub = publish_on(study, "prolific")
    sub = server.add_submission(pub.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=pub.prolific_study_id)
    real = platform.bonus_pay

    def lost(**kwargs):
        real(**kwargs)
        raise PlatformTransientError("Prolific POST bulk-bonus-payments/: ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(CallOutcomeUnknown):
        patch.setattr(platform, "bonus_pay", lost)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    bonus = Bonus.objects.get()
    assert bonus.status == Bonus.Status.UNKNOWN
    setup = PlatformCall.objects.get(operation=OP.BONUS_SETUP)
    bonus_reconciled(token=bonus.token, call=setup, applied=False)
    bonus.refresh_from_db()
    assert bonus.status == Bonus.Status.UNKNOWN
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]
