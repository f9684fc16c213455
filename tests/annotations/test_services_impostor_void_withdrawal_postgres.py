"""Voiding a failed qualification test an impostor took (``impostor.impostor_grant_void``)
racing its worker's withdrawal (``withdrawal.participant_withdraw``) takes the row locks in the
withdrawal's order, on PostgreSQL (READ COMMITTED): the worker's row, then their grant and task.

The withdrawal locks the worker's row ``FOR UPDATE`` and their tasks, and later deletes their
grants (``withdrawal._erase``). The void deleted the failed grant (a row lock on it) and then
marked the task it was taken in, which the withdrawal held: each waited for the other, "deadlock
detected", an ``OperationalError`` nothing retries (a 500 on the consent). The void now locks the
worker's row first (``participants.participant_lock``): it waits for the withdrawal, finds the
grant gone and answers True, so the entry is decided again (where the start refuses the withdrawn
worker). Prolific is the project's fake server, which confirms the worker's session and denies
the impostor's.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import pytest
from django.db import connection

from annotations.models import Assignment, QualificationGrant, Withdrawal
from annotations.services import withdrawal as withdrawal_service
from annotations.services.impostor import impostor_grant_void
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform
from tests.annotations.factories import add_qualification
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.annotations.test_services_impostor import PID, failed_test, hex24, published  # noqa: F401 - a fixture

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def test_a_void_while_the_withdrawal_holds_the_worker_waits_and_finds_the_grant_gone(published, monkeypatch):  # noqa: F811
    study, study_id, server = published
    task = failed_test(study, study_id, add_qualification(study), hex24())  # an impostor's session failed it
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    participant = task.participant

    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: participant_withdraw(user=OPERATOR, study=study,
                                                   pseudonym=worker_pseudonym(Platform.PROLIFIC, PID)))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the worker's row and tasks, not yet committed
    void = Step(lambda: impostor_grant_void(study=study, participant=participant, platform_assignment_id=real))
    void.start()
    try:
        assert waits_on_a_lock(void), "the void did not wait for the withdrawal"
    finally:
        release.set()
    outcome = withdrawal.outcome()  # a deadlock fails one of the two with OperationalError

    assert void.outcome() is True  # the grant went meanwhile: the entry is decided again
    assert outcome.created and outcome.tasks_ended == 1
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not QualificationGrant.objects.filter(participant=participant).exists()
    assert not Assignment.objects.filter(study=study, participant=participant).exclude(
        status=Assignment.Status.WITHDRAWN).exists()
    assert not Assignment.objects.filter(ended_as_impostor=True).exists()
