"""A sync that dies between a bonus call's outcome and its bonus's leaves the bonus to the next sync.

The call is confirmed (or failed) in a transaction of its own and its bonus moved after it
(``sync.platform_calls_reconcile``). A worker dying between the two left the call settled and the
bonus "outcome unknown" for good: every later sync looked only at calls still sent, so nothing ever
asked about that bonus again, and money the worker was paid read as unknown (a researcher paying it
again with another reason would have paid twice). Each sync now settles the bonuses still unknown
whose call is settled (``bonus.bonuses_unknown_settle``)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Bonus, PlatformCall
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms import sync as sync_service
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.common import OP
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import publish_on, submitted


class Killed(BaseException):
    """The worker dies here: nothing after it runs, and its open transaction is rolled back."""


def test_a_sync_killed_between_a_bonus_calls_outcome_and_its_bonus_settles_the_bonus_next_time(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    pub = publish_on(study, "prolific")
    sub = server.add_submission(pub.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=pub.prolific_study_id)
    paid = platform.bonus_pay

    def paid_but_answer_lost(**kwargs):
        paid(**kwargs)
        raise PlatformTransientError("read timed out")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(CallOutcomeUnknown):
        patch.setattr(platform, "bonus_pay", paid_but_answer_lost)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=Decimal("0.50"), reason="Accepted flag.")
    assert Bonus.objects.get().status == Bonus.Status.UNKNOWN
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]

    def dies(**kwargs):
        raise Killed()

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Killed):
        patch.setattr(sync_service, "bonus_reconciled", dies)
        study_sync(study=study)
    assert PlatformCall.objects.get(operation=OP.BONUS).status == PlatformCall.Status.CONFIRMED
    assert Bonus.objects.get().status == Bonus.Status.UNKNOWN  # the call settled, its bonus not

    report = study_sync(study=study)

    assert report.reconciled["confirmed"] == 0  # no call left to ask about
    assert Bonus.objects.get().status == Bonus.Status.PAID
    assert Bonus.objects.get().platform_call == PlatformCall.objects.get(operation=OP.BONUS)
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]  # paid once
