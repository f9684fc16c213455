"""A platform call whose request is still on its way is not reconciled as "not applied", nor
lets another call be decided on the strength of its payment.

- An approval or rejection marked sent less than ``calls.REQUEST_IN_FLIGHT`` ago that the platform
  still lists as submitted is "cannot tell yet" (``CallOutcomeUnknown`` for another attempt): sync
  leaves it sent, and a second attempt (a redelivered "Approve all") sends nothing again.
- A request whose row reconciliation marked failed (Prolific slower than the window) and that then
  answers applied is recorded confirmed, with what it had been marked, and the batch goes on.
- A rejection of held work not submitted here that answers applied after sync marked it failed
  (and gave the researcher's clear back) puts the hold back: the rejected work counts no more.
- Sync's own note of a failed reconcile (``calls.RECONCILE_NOTE``) on a call still within the
  window is not its sender's network error: the next sync still cannot tell, and nothing is sent
  again.
- A lost bonus is not found paid by a payment the platform lists for a sibling bonus of the same
  amount on the same submission whose pay call is still in flight (``prolific.bonus_call_settling``);
  once that sibling is confirmed and the window has passed, the lost one is found unpaid and paid.

The probes run sync (or a second attempt) from inside the platform call, at the moment its
request is on its way; the PostgreSQL test does the same from another thread and connection."""
from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.utils import timezone

from annotations.models import Assignment, Bonus, PlatformCall, PlatformSubmission
from annotations.platforms.base import PlatformError, PlatformTransientError
from annotations.selectors import claims_that_count
from annotations.selectors.platforms import assignments_on_hold
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms import calls
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.common import OP
from annotations.services.platforms.review import (
    assignment_approve,
    assignment_reject,
    study_approve_all,
    submission_clear,
)
from annotations.services.platforms.sync import study_sync
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import (
    _public_url,
    prolific,
    prolific_server,
    publish_on,
    study,
    submitted,
)
from tests.annotations.platforms.test_not_submitted_here import REASON, _finish_here, _held_on_prolific

FIXTURES = (_public_url, prolific, prolific_server, study)  # the platform tests' fixtures, used here

HALF = Decimal("0.50")
TRANSITION = r"/api/v1/submissions/\w+/transition/"


def _work(prolific, study, n: int = 1):
    _platform, server = prolific
    pub = publish_on(study, "prolific")
    out = []
    for i in range(n):
        worker = "abcdef"[i] * 24
        sub = server.add_submission(pub.prolific_study_id, participant_id=worker)
        out.append((submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                              task_id=pub.prolific_study_id), sub))
    return out


def _approve_call(assignment) -> PlatformCall:
    return PlatformCall.objects.get(operation=OP.APPROVE, assignment=assignment)


def _confirmed_total(study) -> Decimal:
    """What the confirmed approvals of ``study`` paid (the audit's confirmed total of them)."""
    return sum(PlatformCall.objects.filter(study=study, operation=OP.APPROVE, status=PlatformCall.Status.CONFIRMED)
               .values_list("amount", flat=True), Decimal("0"))


def test_sync_leaves_an_approval_in_flight_sent(prolific, study):
    platform, server = prolific
    [(work, sub)] = _work(prolific, study)
    real = platform.approve
    seen = []

    def approve_during_sync(**kwargs):
        seen.append(study_sync(study=study).reconciled)  # Prolific still lists the submission as awaiting review
        seen.append(_approve_call(work).status)
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "approve", approve_during_sync)
        approved = assignment_approve(user=OPERATOR, study=study, assignment=work)
    assert seen[0]["unknown"] == 1 and seen[0]["failed"] == 0, seen
    assert seen[1] == PlatformCall.Status.SENT
    call = _approve_call(work)
    assert call.status == PlatformCall.Status.CONFIRMED and call.error == "", (call.status, call.error)
    assert approved.status == Assignment.Status.APPROVED
    assert len(server.calls("POST", TRANSITION)) == 1
    assert call.amount == Decimal("2.00")


def test_redelivered_approve_all_sends_nothing_while_the_first_is_in_flight(prolific, study):
    platform, server = prolific
    [(work, sub)] = _work(prolific, study)
    real = platform.approve
    inner = []

    def first(**kwargs):
        if not inner:  # the same batch delivered again while this request is on its way
            inner.append(None)
            inner[0] = study_approve_all(user=OPERATOR, study=study.pk, assignment_ids=[work.pk])
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "approve", first)
        outer = study_approve_all(user=OPERATOR, study=study.pk, assignment_ids=[work.pk])
    assert inner[0]["unsettled"] == [work.pk], inner
    assert outer["errors"] == [] and outer["unsettled"] == [], outer
    assert len(server.calls("POST", TRANSITION)) == 1, server.calls("POST", TRANSITION)
    assert _approve_call(work).status == PlatformCall.Status.CONFIRMED


def test_an_approval_answering_after_it_was_reconciled_failed_is_confirmed(prolific, study):
    """Prolific slower than the window: sync marks the approval not applied; its answer then says
    applied. The row is confirmed (noting what it was marked) and the batch goes on."""
    platform, server = prolific
    (w1, s1), (w2, s2) = _work(prolific, study, n=2)
    real = platform.approve
    marked = []

    def slower_than_the_window(**kwargs):
        if not marked:
            PlatformCall.objects.filter(operation=OP.APPROVE, assignment=w1).update(
                sent_at=timezone.now() - calls.REQUEST_IN_FLIGHT - timedelta(seconds=1))
            study_sync(study=study)
            marked.append(_approve_call(w1).status)
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "approve", slower_than_the_window)
        out = study_approve_all(user=OPERATOR, study=study.pk, assignment_ids=[w1.pk, w2.pk])
    assert marked == [PlatformCall.Status.FAILED]
    assert out["errors"] == [] and out["approved"] == 2, out
    call = _approve_call(w1)
    assert call.status == PlatformCall.Status.CONFIRMED, (call.status, call.error)
    assert "no record of it" in call.response["confirmed_after_failed"]
    assert Assignment.objects.get(pk=w1.pk).status == Assignment.Status.APPROVED
    assert _confirmed_total(study) == Decimal("4.00")


def test_a_rejection_answering_after_it_was_reconciled_failed_puts_the_hold_back(prolific, study):
    """Held work not submitted here, cleared by the researcher, then rejected; Prolific is slower
    than the window: sync marks the rejection not applied and gives the clear back. The rejection
    then answers applied: it is confirmed, and the hold is back as the rejection keeps it, so the
    worker's finishing the task here counts nothing and "Approve all" leaves it."""
    platform, server = prolific
    _server, sub, task = _held_on_prolific(prolific, study, "active")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    row = PlatformSubmission.objects.get(platform_assignment_id=sub["id"])
    submission_clear(user=researcher, submission=row)
    real = platform.reject
    marked = []

    def slower_than_the_window(**kwargs):
        PlatformCall.objects.filter(operation=OP.REJECT, assignment=task).update(
            sent_at=timezone.now() - calls.REQUEST_IN_FLIGHT - timedelta(seconds=1))
        study_sync(study=study)
        marked.append((PlatformCall.objects.get(operation=OP.REJECT).status,
                       PlatformSubmission.objects.get(pk=row.pk).cleared_at is not None))
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "reject", slower_than_the_window)
        assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)
    assert marked == [(PlatformCall.Status.FAILED, True)]  # not applied: the clear was given back
    call = PlatformCall.objects.get(operation=OP.REJECT)
    assert call.status == PlatformCall.Status.CONFIRMED and "confirmed_after_failed" in call.response
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    row.refresh_from_db()
    assert (row.cleared_at, row.cleared_by) == (None, None), "the rejected work's hold was not put back"

    _finish_here(task)
    assert assignments_on_hold(study=study).filter(pk=task.pk).exists()
    assert not claims_that_count(study=study).filter(assignment=task).exists()
    assert all(u.n_completed == 0 for u in study.units.filter(claims__assignment=task))
    outcome = study_approve_all(user=OPERATOR, study=study)
    assert outcome["approved"] == 0 and not PlatformCall.objects.filter(operation=OP.APPROVE).exists()


def test_sync_note_on_a_call_in_flight_leaves_it_unknown_at_the_next_sync(prolific, study):
    """The first sync cannot ask Prolific (a refusal: its note starts ``RECONCILE_NOTE``) while the
    approval is on its way; the second, still within the window, cannot tell either (the note is
    the app's, not a network error of the sender's), and a redelivered batch sends nothing again."""
    platform, server = prolific
    [(work, sub)] = _work(prolific, study)
    real = platform.approve
    seen = []

    def refused(**kwargs):
        raise PlatformError("Prolific GET submissions/: 503 Service Unavailable")

    def approve_during_syncs(**kwargs):
        if seen:  # an attempt that sent it again
            return real(**kwargs)
        with pytest.MonkeyPatch.context() as inner:
            inner.setattr(platform, "assignment_status", refused)
            seen.append(study_sync(study=study).reconciled)
        seen.append(_approve_call(work).error)
        seen.append(study_sync(study=study).reconciled)  # Prolific answers again: still awaiting review
        seen.append(study_approve_all(user=OPERATOR, study=study.pk, assignment_ids=[work.pk])["unsettled"])
        seen.append(_approve_call(work).status)
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "approve", approve_during_syncs)
        assignment_approve(user=OPERATOR, study=study, assignment=work)
    first, note, second, unsettled, status = seen
    assert first["unknown"] == 1 and first["failed"] == 0, first
    assert note.startswith(calls.RECONCILE_NOTE) and "503" in note, note
    assert second["unknown"] == 1 and second["failed"] == 0, second
    assert unsettled == [work.pk]
    assert status == PlatformCall.Status.SENT
    assert len(server.calls("POST", TRANSITION)) == 1, server.calls("POST", TRANSITION)
    call = _approve_call(work)
    assert call.status == PlatformCall.Status.CONFIRMED and call.error == ""
    assert _confirmed_total(study) == Decimal("2.00")


def test_lost_bonus_is_not_found_paid_by_a_sibling_in_flight(prolific, study, settings):
    platform, server = prolific
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 3600
    [(work, sub)] = _work(prolific, study)
    real_pay = platform.bonus_pay

    def never_reached(**kwargs):
        raise PlatformTransientError("Prolific POST bulk-bonus-payments/: ConnectError")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(CallOutcomeUnknown):
        patch.setattr(platform, "bonus_pay", never_reached)
        bonus_pay(user=OPERATOR, study=study, assignment=work, amount=HALF, reason="flag accepted")

    def paid_then_sync(**kwargs):
        out = real_pay(**kwargs)  # Prolific has paid X ...
        study_sync(study=study)  # ... and sync runs before X's answer is recorded
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platform, "bonus_pay", paid_then_sync)
        x = bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=work.pk), amount=HALF,
                      reason="good work")
    assert x.status == Bonus.Status.PAID
    y = Bonus.objects.get(reason="flag accepted")
    assert y.status == Bonus.Status.UNKNOWN, (y.status, y.error)
    assert len(server.payments) == 1

    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0  # the window has passed: Y is found unpaid
    study_sync(study=study)
    y.refresh_from_db()
    assert y.status == Bonus.Status.PENDING, (y.status, y.error)
    paid = bonus_pay(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=work.pk), amount=HALF,
                     reason="flag accepted")
    assert paid.status == Bonus.Status.PAID
    assert server.submissions[sub["id"]]["bonus_payments"] == [50, 50] and len(server.payments) == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_pg_sync_and_redelivery_from_other_connections_while_an_approval_is_in_flight(prolific):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    st = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                    estimated_minutes_per_task=Decimal("6.0"))
    platform, server = prolific
    [(work, sub)] = _work(prolific, st)
    real_transition = server._transition_submission
    arrived, release = threading.Event(), threading.Event()

    def slow_transition(**kwargs):  # Prolific takes its time to process the approval
        arrived.set()
        release.wait(20)
        return real_transition(**kwargs)

    server._transition_submission = slow_transition
    errors = []

    def approve():
        try:
            assignment_approve(user=OPERATOR, study=st, assignment=Assignment.objects.get(pk=work.pk))
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(repr(exc))
        finally:
            connections.close_all()

    first = threading.Thread(target=approve)
    first.start()
    try:
        assert arrived.wait(20)
        report = study_sync(study=st)
        again = study_approve_all(user=OPERATOR, study=st.pk, assignment_ids=[work.pk])
        status_meanwhile = _approve_call(work).status
    finally:
        release.set()
        first.join(30)
    assert errors == []
    assert report.reconciled["unknown"] == 1 and report.reconciled["failed"] == 0, report.reconciled
    assert again["unsettled"] == [work.pk], again
    assert status_meanwhile == PlatformCall.Status.SENT
    assert len(server.calls("POST", TRANSITION)) == 1
    call = _approve_call(work)
    assert call.status == PlatformCall.Status.CONFIRMED and call.error == ""
    assert Assignment.objects.get(pk=work.pk).status == Assignment.Status.APPROVED
    assert _confirmed_total(st) == Decimal("2.00")
