"""A Prolific bonus's pay call pays what the bulk-bonus record holds, not what was sent, and it is
not idempotent: the set-up's answer (its total, in the smallest currency unit) is checked against
the amount sent before any pay call. A record of another amount is never paid: the set-up call is
recorded failed with the reason, and the bonus fails with it."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Bonus, PlatformCall
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.common import OP
from tests.annotations.platforms.conftest import on_platform, publish_on, submitted

HALF = Decimal("0.50")


@pytest.fixture
def study(db, study):
    return on_platform(study, "prolific")


def _work(prolific, study):
    platform, server = prolific
    publication = publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    return work, sub, server


def _records_as(server, **answer):
    """Make ``server``'s set-up keep 100 times the amount sent (0.50 as 5000 cents), with its fees
    on that, and answer with ``answer`` over its own documented fields (a value None: null)."""
    real = server._setup_bonus

    def setup(*, body, query):
        status, payload = real(body=body, query=query)
        if status == 201:
            bulk = server.bulk_bonuses[payload["id"]]
            bulk["rows"] = [(ident, cents * 100) for ident, cents in bulk["rows"]]
            kept = sum(c for _, c in bulk["rows"])
            payload = {**payload, "amount": kept, "fees": round(kept / 3), "total_amount": kept + round(kept / 3),
                       **answer}
        return status, payload

    server._setup_bonus = setup


@pytest.mark.parametrize("answer", [{}, {"amount": None}, {"amount": "5000"}],
                         ids=["its amount", "amount null: total less fees", "amount as text"])
def test_a_setup_recording_another_amount_is_never_paid(prolific, study, answer):
    work, sub, server = _work(prolific, study)
    _records_as(server, **answer)

    with pytest.raises(PlatformServiceError, match="not the 50"):
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")

    assert server.calls("POST", r"/api/v1/bulk-bonus-payments/\w+/pay/") == []
    assert server.payments == [] and server.submissions[sub["id"]]["bonus_payments"] == []
    setup = PlatformCall.objects.get(operation=OP.BONUS_SETUP)
    assert setup.status == PlatformCall.Status.FAILED
    assert "not the 50 (smallest currency unit) sent" in setup.error
    assert not PlatformCall.objects.filter(operation=OP.BONUS).exists()
    bonus = Bonus.objects.get()
    assert bonus.status == Bonus.Status.FAILED and "not the 50" in bonus.error


@pytest.mark.parametrize("answer", [{}, {"amount": None}, {"amount": None, "vat": None}, {"amount": 50.0},
                                    {"amount": None, "fees": None}],
                         ids=["documented", "amount null", "amount and vat null", "amount as a float",
                              "nothing to check"])
def test_a_setup_answered_as_documented_is_paid(prolific, study, answer):
    # Prolific's answer gives the participants' amount (or null), the fees and VAT on it, and the
    # total with fees: a total with fees is never compared with the amount itself (the first check
    # did, and refused every bonus whose answer had a null amount).
    work, sub, server = _work(prolific, study)
    real = server._setup_bonus

    def setup(*, body, query):
        status, payload = real(body=body, query=query)
        return status, ({**payload, **answer} if status == 201 else payload)

    server._setup_bonus = setup
    bonus = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")
    assert bonus.status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]


def test_a_setup_recording_the_amount_sent_is_paid_once(prolific, study):
    """The documented answer (amount, fees, VAT and total in the smallest unit, as the local server gives them)."""
    work, sub, server = _work(prolific, study)

    bonus = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="good")

    assert bonus.status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]
    assert len(server.payments) == 1


@pytest.mark.parametrize("answer, accepted", [
    ({"amount": 50, "fees": 17, "vat": 0, "total_amount": 67}, True),  # as documented
    ({"amount": None, "fees": 17, "vat": None, "total_amount": 67}, True),
    ({"amount": 50.0}, True),
    ({"amount": 50, "fees": 16.67, "vat": 3.33, "total_amount": 71}, True),  # each rounded on its own
    ({"amount": None, "fees": 17, "vat": 0, "total_amount": 66}, True),
    ({}, True),  # states nothing to check
    ({"amount": 50, "fees": 15, "vat": 3, "total_amount": 999999}, False),  # a total that is not its parts
    ({"amount": None, "fees": None, "total_amount": 1}, False),  # the balance pays less than the worker gets
    ({"amount": None, "fees": -100, "total_amount": -50}, False),  # figures below 0
    ({"amount": 5000, "fees": 1667, "total_amount": 6667}, False),  # another amount, consistent in itself
])
def test_a_setup_answer_is_held_together(answer, accepted):
    from annotations.platforms.prolific import _setup_amount_problem

    problem = _setup_amount_problem(answer, sent=50)
    assert (problem == "") is accepted, problem
