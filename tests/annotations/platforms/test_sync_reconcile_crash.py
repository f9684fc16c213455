"""A sync that dies while it reconciles a call leaves nothing half-recorded: the call's outcome and
what follows from it are written together (``sync.platform_calls_reconcile``).

Before, the call was confirmed in a transaction of its own and its bonus moved to paid after it. A
worker dying between the two left the call confirmed and the bonus "outcome unknown" for good: every
later sync looks only at calls still sent, so nothing ever asked about that bonus again, and the
money the worker was paid read as unknown (a researcher paying it again with another reason would
have paid twice). Now the call stays sent, and the next sync settles both."""
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


def test_a_sync_killed_between_a_bonus_calls_outcome_and_its_bonus_settles_both_next_time(prolific, study, settings):
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
    assert PlatformCall.objects.get(operation=OP.BONUS).status == PlatformCall.Status.SENT  # nothing half-written

    report = study_sync(study=study)

    assert report.reconciled["confirmed"] == 1
    assert PlatformCall.objects.get(operation=OP.BONUS).status == PlatformCall.Status.CONFIRMED
    assert Bonus.objects.get().status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]  # paid once
