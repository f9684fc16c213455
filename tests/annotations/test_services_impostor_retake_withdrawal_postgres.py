"""A retake of the qualification test (``impostor.grant_retake_start``) racing its worker's
withdrawal (``withdrawal.participant_withdraw``) takes the row locks in the withdrawal's order, on
PostgreSQL (READ COMMITTED): the worker's row, then their failed grant.

The retake deleted the failed grant (a row lock on it) and only then started the task, whose first
lock is the worker's row (``selectors.participant_blocked``, ``lock``). The withdrawal locks the
worker's row ``FOR UPDATE`` first and deletes their grants later (``withdrawal._erase``). A retake
holding the grant and a withdrawal holding the worker each waited for the other: "deadlock
detected", an ``OperationalError`` nothing retries. The retake now locks the worker's row before it
touches the grant, and is refused like any start (``ParticipantBlocked``) when the worker was
withdrawn meanwhile.

Each order is played with threads on their own connections: the retake paused after it took its
first lock, then the withdrawal; and the withdrawal paused holding the worker, then the retake.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test import Client

from annotations.models import Assignment, QualificationGrant, Withdrawal
from annotations.services import withdrawal as withdrawal_service
from annotations.services.assignment import assignment_start
from annotations.services.errors import NotQualified, ParticipantBlocked
from annotations.services.impostor import grant_for_retake, grant_retake_start
from annotations.services.participants import NOT_AVAILABLE
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, start
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.annotations.test_qualification_retakes import fail_test

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def _failed_typed_identifier():
    """A typed identifier that failed the test in one browser: (study, participant, its failed grant)
    as another browser's entry finds it (``grant_for_retake``: its cookie names no task)."""
    study = make_study(n_items=8, n_sources=1, units_per_task=2, quota=5)
    add_qualification(study)
    browser = Client()
    failed = fail_test(browser, start(browser, entry_url(study), identifier="x@lab.org"))
    participant = failed.participant
    grant = grant_for_retake(study=study, participant=participant, held_task_id=None,
                             refusal=NotQualified("refused"))
    assert grant is not None and grant.pk == failed.pk
    return study, participant, grant


def _withdraw(study, participant):
    return participant_withdraw(user=OPERATOR, study=study,
                                pseudonym=worker_pseudonym(participant.platform, participant.external_id))


def _retake(study, participant, grant, *, before_start=None):
    """The retake as the consent's transaction runs it: the grant set aside for a new task."""
    def new_task():
        if before_start is not None:
            before_start()
        return assignment_start(study=study, participant=participant, consented=True, resume=False)

    with transaction.atomic():
        return grant_retake_start(study=study, participant=participant, grant=grant, start=new_task)


def test_a_withdrawal_during_a_retake_waits_for_it_then_erases_it():
    study, participant, grant = _failed_typed_identifier()
    reached, release = threading.Event(), threading.Event()

    def pause():  # inside the retake's transaction, its first locks taken, its task not started yet
        reached.set()
        assert release.wait(WAIT), "never released"

    retake = Step(lambda: _retake(study, participant, grant, before_start=pause))
    retake.start()
    assert reached.wait(WAIT)
    withdrawal = Step(lambda: _withdraw(study, participant))
    withdrawal.start()
    try:
        assert waits_on_a_lock(withdrawal), "the withdrawal did not wait for the retake"
    finally:
        release.set()
    task = retake.outcome()  # a deadlock fails one of the two with OperationalError
    outcome = withdrawal.outcome()

    assert task.study_id == study.pk and task.pk != grant.assignment_id
    assert outcome.created and outcome.tasks_ended == 2  # the failed task and the retake's
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not QualificationGrant.objects.filter(participant=participant).exists()
    assert not Assignment.objects.filter(study=study, participant=participant).exclude(
        status=Assignment.Status.WITHDRAWN).exists()


def test_a_retake_while_the_withdrawal_holds_the_worker_waits_and_is_refused(monkeypatch):
    study, participant, grant = _failed_typed_identifier()
    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: _withdraw(study, participant))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the worker's row FOR UPDATE, not yet committed
    retake = Step(lambda: _retake(study, participant, grant))
    retake.start()
    try:
        assert waits_on_a_lock(retake), "the retake did not wait for the withdrawal"
    finally:
        release.set()
    outcome = withdrawal.outcome()  # a deadlock fails one of the two with OperationalError
    with pytest.raises(ParticipantBlocked) as refused:
        retake.outcome()

    assert refused.value.message == NOT_AVAILABLE
    assert outcome.created and outcome.tasks_ended == 1
    assert not QualificationGrant.objects.filter(participant=participant).exists()
    assert not Assignment.objects.filter(study=study, participant=participant).exclude(
        status=Assignment.Status.WITHDRAWN).exists()
