"""Paying a bonus again while its worker is withdrawn takes the row locks in one order, on
PostgreSQL (READ COMMITTED): the task, then its ``Bonus`` row.

``bonus._pay`` locks the task (``_lock_bonusable``) and then the bonus row it pays
(``select_for_update().get_or_create``). The withdrawal's ``_refuse_while_owed`` locked the
worker's bonuses by a query joining their tasks, without ``of=``: the bonus row first, then the
joined task. A payment holding the task and a withdrawal holding the bonus each waited for the
other: "deadlock detected", an ``OperationalError`` nothing retries. The withdrawal now locks the
worker's tasks (by pk) before their bonuses, and the bonuses alone.

The payment is paused right after its task is locked; the withdrawal then starts on its own
connection and must wait for that task, not hold the bonus.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from annotations.models import Assignment, Bonus, Withdrawal
from annotations.services.platforms import bonus as bonus_service
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.tokens import bonus_token
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.annotations.test_services_withdrawal import done

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

HALF = Decimal("0.50")
WHY = "good work"


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def test_a_bonus_paid_again_while_its_worker_is_withdrawn_does_not_deadlock(monkeypatch):
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    participant = ParticipantFactory()
    task = done(study, participant)  # submitted by link: no platform decision owed
    # Its bonus was asked for before and not settled (the attempt stopped before it was recorded).
    Bonus.objects.create(token=bonus_token(assignment=task, amount=HALF, kind=Bonus.Kind.OTHER, reason=WHY),
                         assignment=task, participant=participant, amount=HALF, reason=WHY)
    reached, release = paused_after(bonus_service, "_lock_bonusable", monkeypatch)
    payer = Step(lambda: bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=task.pk),
                                   amount=HALF, reason=WHY))
    payer.start()
    assert reached.wait(WAIT)  # the payment holds the task FOR UPDATE, its bonus row not yet
    withdrawal = Step(lambda: participant_withdraw(
        user=OPERATOR, study=study, pseudonym=worker_pseudonym(participant.platform, participant.external_id)))
    withdrawal.start()
    try:
        assert waits_on_a_lock(withdrawal), "the withdrawal did not wait for the payment"
    finally:
        release.set()
    paid = payer.outcome()  # a deadlock fails one of the two with OperationalError
    outcome = withdrawal.outcome()
    assert paid.status == Bonus.Status.RECORDED
    assert outcome.created and outcome.tasks_ended == 1
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert list(Bonus.objects.values_list("assignment_id", "status")) == [(task.pk, Bonus.Status.RECORDED)]
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN


def test_a_first_bonus_paid_while_its_worker_is_withdrawn_does_not_deadlock(monkeypatch):
    # A bonus asked for the first time inserts its row, whose foreign key to the worker takes FOR KEY
    # SHARE on the worker's row. The withdrawal held that row FOR UPDATE (which blocks KEY SHARE)
    # while it waited for the task the payment held: "deadlock detected". The payment now locks the
    # worker's row before its task, as the withdrawal does. Paused after its task lock here, it holds
    # both, and the withdrawal waits for it.
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    participant = ParticipantFactory()
    task = done(study, participant)
    reached, release = paused_after(bonus_service, "_lock_bonusable", monkeypatch)
    payer = Step(lambda: bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=task.pk),
                                   amount=HALF, reason=WHY))
    payer.start()
    assert reached.wait(WAIT)  # the payment holds the task FOR UPDATE; its bonus row is inserted next
    withdrawal = Step(lambda: participant_withdraw(
        user=OPERATOR, study=study, pseudonym=worker_pseudonym(participant.platform, participant.external_id)))
    withdrawal.start()
    try:
        assert waits_on_a_lock(withdrawal), "the withdrawal did not wait for the payment"
    finally:
        release.set()
    paid = payer.outcome()  # a deadlock fails one of the two with OperationalError
    outcome = withdrawal.outcome()
    assert paid.status == Bonus.Status.RECORDED
    assert outcome.created and outcome.tasks_ended == 1
    assert list(Bonus.objects.values_list("assignment_id", "status")) == [(task.pk, Bonus.Status.RECORDED)]
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN
