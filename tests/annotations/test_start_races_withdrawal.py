"""A task start racing the worker's withdrawal gives the withdrawn worker no task that counts, on
PostgreSQL (READ COMMITTED). The start reads whether the worker is blocked or withdrew under a lock
of the worker's row (``selectors.participant_blocked``, ``lock``) that conflicts with the ``FOR UPDATE`` the
withdrawal takes on it (``withdrawal.participant_withdraw``). Before, the check ran outside any
lock: check passed, the withdrawal committed, then the task was inserted, and its answers counted.

Each order is played with threads on their own connections: the withdrawal run from inside the
start (after its check, before its insert), and the start run while the withdrawal holds the row.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import pytest
from django.db import connection

from annotations.models import Assignment, Withdrawal
from annotations.services import assignment as assignment_service
from annotations.services import withdrawal as withdrawal_service
from annotations.services.assignment import assignment_start
from annotations.services.errors import ParticipantBlocked
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.annotations.test_services_withdrawal import done

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def _worker_with_a_submitted_task():
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    participant = ParticipantFactory()
    done(study, participant)  # took part: the withdrawal finds them; nothing owed (no platform)
    return study, participant


def _withdraw(study, participant):
    return participant_withdraw(user=OPERATOR, study=study,
                                pseudonym=worker_pseudonym(participant.platform, participant.external_id))


def test_a_withdrawal_committing_between_the_starts_check_and_its_insert_leaves_no_task(monkeypatch):
    study, participant = _worker_with_a_submitted_task()
    qualification_pending = assignment_service._qualification_pending
    withdrawal = Step(lambda: _withdraw(study, participant))

    def withdraw_meanwhile(**kwargs):
        # after the start's blocked check, before its insert: the withdrawal runs on its own connection
        withdrawal.start()
        waits_on_a_lock(withdrawal)  # fixed: it waits for this start's row lock; before: it committed
        return qualification_pending(**kwargs)

    monkeypatch.setattr(assignment_service, "_qualification_pending", withdraw_meanwhile)
    started = Step(lambda: assignment_start(study=study, participant=participant))
    started.start()
    started.outcome()  # the start goes on (its task is made) ...
    withdrawal.outcome()  # ... and the withdrawal, after it, erases it

    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not Assignment.objects.filter(study=study, participant=participant).exclude(
        status=Assignment.Status.WITHDRAWN).exists(), \
        list(Assignment.objects.filter(study=study, participant=participant).values_list("id", "status"))
    with pytest.raises(ParticipantBlocked):
        assignment_start(study=study, participant=participant)


def test_a_start_while_the_withdrawal_holds_the_worker_waits_and_is_refused(monkeypatch):
    study, participant = _worker_with_a_submitted_task()
    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: _withdraw(study, participant))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the worker's row FOR UPDATE, not yet committed
    started = Step(lambda: assignment_start(study=study, participant=participant))
    started.start()
    try:
        assert waits_on_a_lock(started), "the start did not wait for the withdrawal"
    finally:
        release.set()
    withdrawal.outcome()
    with pytest.raises(ParticipantBlocked):
        started.outcome()
    assert not Assignment.objects.filter(study=study, participant=participant).exclude(
        status=Assignment.Status.WITHDRAWN).exists()
