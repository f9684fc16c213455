"""A Prolific bonus call whose answer was lost is not decided as not applied while it may still be
on its way: one window, ``RL_PROLIFIC_BONUS_SETTLE_SECONDS``, owned by
``prolific.bonus_call_settling``, for the set-up call (``calls.reconcile_call``) and the pay call
(``ProlificPlatform.bonus_was_paid``) alike: both are undecided inside it and not applied past it."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from annotations.models import Bonus, PlatformCall
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.calls import reconcile_call
from annotations.services.platforms.common import OP
from tests.annotations.platforms.conftest import publish_on, submitted


def test_a_lost_set_up_and_a_lost_pay_call_share_one_settle_window(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 600
    pub = publish_on(study, "prolific")
    sub = server.add_submission(pub.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=pub.prolific_study_id)

    def lost(**kwargs):  # the pay call never reached Prolific and its answer is lost
        raise PlatformTransientError("Prolific POST bulk-bonus-payments/: ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(CallOutcomeUnknown):
        patch.setattr(platform, "bonus_pay", lost)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=Decimal("0.50"), reason="good")
    assert Bonus.objects.get().status == Bonus.Status.UNKNOWN
    setup = PlatformCall.objects.get(operation=OP.BONUS_SETUP)
    pay = PlatformCall.objects.get(operation=OP.BONUS, status=PlatformCall.Status.SENT)
    assert server.submissions[sub["id"]]["bonus_payments"] == []

    for seconds_ago, decided in ((599, None), (601, False)):
        for call in (setup, pay):
            call.sent_at = timezone.now() - timedelta(seconds=seconds_ago)
        assert reconcile_call(platform=platform, call=setup) is decided, seconds_ago
        assert reconcile_call(platform=platform, call=pay) is decided, seconds_ago
