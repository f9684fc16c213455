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
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms import sync as sync_service
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


def _second_lost(platform, study, work, *, paid: bool, error: Exception | None = None):
    """The second 0.50 bonus (another reason), its pay call's answer lost: after Prolific paid it
    (``paid``) or before the request left; by ``error`` (the worker killed: the bonus stays pending;
    a read timeout, ``PlatformTransientError``: its outcome is unknown)."""
    real = platform.bonus_pay
    error = error or RuntimeError("worker killed")

    def lose_the_answer(**kwargs):
        if paid:
            real(**kwargs)
        raise error

    raised = CallOutcomeUnknown if isinstance(error, PlatformTransientError) else type(error)
    with pytest.MonkeyPatch.context() as patch, pytest.raises(raised):
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


class Killed(BaseException):
    """The worker dies here: nothing after it runs, and its open transaction is rolled back."""


@pytest.mark.parametrize(("lost_by", "left"), [(None, Bonus.Status.PENDING),
                                               (PlatformTransientError("read timed out"), Bonus.Status.UNKNOWN)])
def test_a_sync_killed_between_a_bonus_calls_outcome_and_its_bonus_settles_the_bonus_next_time(
        prolific, study, settings, lost_by, left):
    """The call is confirmed in a transaction of its own and its bonus moved after it. A sync dying
    between the two left the bonus unsettled for good ("pending" here, "outcome unknown" where the
    answer was lost in transit): every later sync looked only at calls still sent, so nothing asked
    about it again, though the worker was paid (the withdrawal refused as owing it; a researcher paying
    it again with another reason would have paid twice). Each sync now settles a bonus not settled
    whose call is (``bonus.bonuses_settle_from_calls``)."""
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    work, sub, _ = _prolific_work(prolific, study)
    second = _second_lost(platform, study, work, paid=True, error=lost_by)
    assert second.status == left

    def dies(**kwargs):
        raise Killed()

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Killed):
        patch.setattr(sync_service, "bonus_reconciled", dies)
        study_sync(study=study)
    call = PlatformCall.objects.get(idempotency_key=f"prolific:bonus:{second.token}")
    second.refresh_from_db()
    assert (call.status, second.status) == (PlatformCall.Status.CONFIRMED, left)

    report = study_sync(study=study)

    second.refresh_from_db()
    assert report.reconciled["confirmed"] == 0  # no call left to ask about
    assert (second.status, second.platform_call) == (Bonus.Status.PAID, call)
    assert server.submissions[sub["id"]]["bonus_payments"] == [50, 50]  # each bonus paid once


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


# -- Sibling reconciliations are serialised ------------------------------------------------------
def _lost(platform, study, work, *, reason: str, paid: bool) -> Bonus:
    """A 0.50 bonus with ``reason`` whose pay call's answer was lost, after Prolific paid it
    (``paid``) or before the request left: its call stays ``sent``."""
    real = platform.bonus_pay

    def lose_the_answer(**kwargs):
        if paid:
            real(**kwargs)
        raise RuntimeError("worker killed")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus_pay", lose_the_answer)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=reason)
    bonus = Bonus.objects.get(reason=reason)
    assert PlatformCall.objects.get(idempotency_key=f"prolific:bonus:{bonus.token}").status == "sent"
    return bonus


def test_two_lost_same_amount_bonuses_are_reconciled_one_after_the_other_under_the_assignments_lock(
        prolific, study, settings, monkeypatch):
    """Both answers lost, only the first paid: a researcher's retry of the first and beat's sync
    (which reaches the second) each count the payments the app's other confirmed calls explain.
    Each reconciliation takes the locks on every bonus call of the platform assignment (both
    calls) and, inside that same transaction, asks the platform, counts and writes its outcome:
    so a reconciliation at the same moment would wait for the other's outcome, as the second does
    here (it sees the first confirmed). SQLite takes no row locks, so the test checks the order
    and the transaction, not two threads."""
    from django.db import connection
    from django.db.models.signals import post_save

    from annotations.services.platforms import calls

    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    pub = publish_on(study, "prolific")
    sub = server.add_submission(pub.prolific_study_id, participant_id="a" * 24)
    work = submitted(study, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=pub.prolific_study_id)
    first = _lost(platform, study, work, reason=FIRST, paid=True)
    second = _lost(platform, study, work, reason=SECOND, paid=False)
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]  # one payment for two lost bonuses
    keys = {f"prolific:bonus:{first.token}": FIRST, f"prolific:bonus:{second.token}": SECOND}
    ids = set(PlatformCall.objects.filter(idempotency_key__in=keys).values_list("pk", flat=True))

    events: list[tuple] = []
    real_serialise = getattr(calls, "reconcile_serialise", None)

    def serialise(call):
        taken = real_serialise(call)
        events.append(("lock", keys[call.idempotency_key], connection.atomic_blocks[-1]))
        return taken

    real_ask = platform.bonus_was_paid

    def ask(**kwargs):
        events.append(("ask", kwargs["reason"], list(connection.atomic_blocks), list(kwargs["accounted"])))
        return real_ask(**kwargs)

    def written(sender, instance, **kwargs):
        if instance.idempotency_key in keys and instance.status in ("confirmed", "failed"):
            events.append(("write", keys[instance.idempotency_key], list(connection.atomic_blocks),
                           instance.status))

    monkeypatch.setattr(calls, "reconcile_serialise", serialise, raising=False)
    monkeypatch.setattr(platform, "bonus_was_paid", ask)
    post_save.connect(written, sender=PlatformCall, dispatch_uid="serialised-reconcile")
    try:
        retried = bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason=FIRST)
        report = study_sync(study=study)
    finally:
        post_save.disconnect(sender=PlatformCall, dispatch_uid="serialised-reconcile")

    # The outcome: the first is the one payment, the second was never paid.
    assert retried.status == Bonus.Status.PAID and report.reconciled == {"confirmed": 0, "failed": 1, "unknown": 0}
    second.refresh_from_db()
    assert second.status == Bonus.Status.PENDING
    assert PlatformCall.objects.get(idempotency_key=f"prolific:bonus:{second.token}").status == "failed"
    # The order: each reconciliation locked, then asked and counted, then wrote its outcome, all in
    # the transaction that took the lock; the second counted the first as already explained.
    assert [e[:2] for e in events] == [("lock", FIRST), ("ask", FIRST), ("write", FIRST),
                                       ("lock", SECOND), ("ask", SECOND), ("write", SECOND)]
    for lock, ask_event, write in (events[0:3], events[3:6]):
        assert lock[2] in ask_event[2] and lock[2] in write[2]  # still inside the locking transaction
    assert events[1][3] == [] and events[4][3] == [FIRST]
    assert events[2][3] == "confirmed" and events[5][3] == "failed"
    # The locks cover every bonus call of the platform assignment (the code takes them by id).
    with CaptureLocked() as locked:
        calls.reconcile_serialise(PlatformCall.objects.get(idempotency_key=f"prolific:bonus:{second.token}"))
    assert locked.ids == ids


class CaptureLocked:
    """The ids of the PlatformCall rows a ``select_for_update`` query evaluated inside the block
    selected (SQLite sends no FOR UPDATE: the query is read from Django's side)."""

    def __enter__(self):
        from django.db.models.query import QuerySet

        self.ids: set[int] = set()
        self._real = QuerySet._fetch_all
        capture = self

        def fetch(queryset):
            self_real = capture._real
            self_real(queryset)
            if queryset.query.select_for_update and queryset.model is PlatformCall:
                capture.ids.update(row if isinstance(row, int) else row.pk for row in queryset._result_cache)

        QuerySet._fetch_all = fetch
        return self

    def __exit__(self, *exc):
        from django.db.models.query import QuerySet

        QuerySet._fetch_all = self._real
        return False
