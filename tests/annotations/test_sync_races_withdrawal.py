"""A sync running while a worker withdraws stores nothing of theirs once the withdrawal is made.

A sync reads the study's withdrawals once, at its start (``study_sync``), then stores the platform's
rows one by one. A withdrawal made in between found no row of the worker to erase (the sync had not
stored it yet), and the sync then stored it with their raw platform id; every later sync skips
that worker's rows, so the id stayed for good. Each row's store now reads the withdrawals again,
under the study's ``WITHDRAWAL_LOCK``, which a withdrawal holds alone for its whole transaction.
"""
from __future__ import annotations

import pytest
from django.db import connection

from annotations.models import Assignment, PlatformSubmission, Withdrawal
from annotations.services import withdrawal as withdrawal_service
from annotations.services.platforms import sync as sync_service
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve
from annotations.services.platforms.sync import study_sync
from annotations.services.withdrawal import participant_withdraw
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import open_study, start_assignment
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.annotations.test_sync_unlisted_work import enter, hex24, minutes_pass, published  # noqa: F401

pytestmark = pytest.mark.django_db


def _published():
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=3, status="draft", platform="prolific")
    open_study(study)
    return study, study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id


def _withdrawn_after_the_sync_read_the_withdrawals(monkeypatch, study, worker_id):
    """Make the next sync read the study's withdrawals, then withdraw ``worker_id`` before it stores
    any row: what a withdrawal committed while a sync runs looks like to that sync."""
    read = sync_service.study_withdrawal_digests

    def read_then_withdraw(*, study):
        digests = read(study=study)
        participant_withdraw(user=OPERATOR, study=study, worker_id=worker_id)
        return digests

    monkeypatch.setattr(sync_service, "study_withdrawal_digests", read_then_withdraw)


def test_a_worker_known_from_the_platforms_rows_withdrawn_during_a_sync_keeps_no_row(prolific, monkeypatch):
    _platform, server = prolific
    study, pid = _published()
    server.add_submission(pid, participant_id="p_ghost")  # submitted there, no task here
    study_sync(study=study)
    assert PlatformSubmission.objects.filter(worker_id="p_ghost").exists()
    _withdrawn_after_the_sync_read_the_withdrawals(monkeypatch, study, "p_ghost")

    report = study_sync(study=study)

    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not PlatformSubmission.objects.filter(worker_id="p_ghost").exists()
    assert report.remote == 1 and report.flagged == 0  # listed, neither stored nor counted


def test_a_participant_withdrawn_during_the_first_sync_of_their_session_keeps_no_row(prolific, monkeypatch):
    """p1 is working on the task their Prolific session opened; the sync that would first store that
    session meets their withdrawal, which ended and erased the task."""
    _platform, server = prolific
    study, pid = _published()
    session = server.add_submission(pid, participant_id="p1", status="ACTIVE")
    task = start_assignment(study, platform="prolific", worker_id="p1", assignment_id=session["id"], task_id=pid)
    server.add_submission(pid, participant_id="p2", status="ACTIVE")  # someone else's, stored as usual
    _withdrawn_after_the_sync_read_the_withdrawals(monkeypatch, study, "p1")

    report = study_sync(study=study)

    assert not Assignment.objects.filter(pk=task.pk).exists()
    assert not PlatformSubmission.objects.filter(worker_id="p1").exists()
    assert list(PlatformSubmission.objects.values_list("worker_id", flat=True)) == ["p2"]
    assert report.remote == 2


def test_a_sync_meeting_the_withdrawal_of_another_participant_whose_task_a_session_names_stores_no_task(
        prolific, monkeypatch):
    """p1's task was entered with p2's Prolific session (a worker mismatch). p1 withdraws after the
    sync read the study's tasks: the row of p2's session names no task, as p1's is erased. Before,
    it named the erased task, and the sync failed at its commit (a foreign-key error)."""
    _platform, server = prolific
    study, pid = _published()
    session = server.add_submission(pid, participant_id="p2")
    task = start_assignment(study, platform="prolific", worker_id="p1", assignment_id=session["id"], task_id=pid)
    read = sync_service._stored_work

    def read_then_withdraw(**kwargs):
        stored = read(**kwargs)
        participant_withdraw(user=OPERATOR, study=study, worker_id="p1")
        return stored

    monkeypatch.setattr(sync_service, "_stored_work", read_then_withdraw)

    report = study_sync(study=study)

    assert not Assignment.objects.filter(pk=task.pk).exists()
    row = PlatformSubmission.objects.get()
    assert (row.worker_id, row.assignment_id, row.flag) == ("p2", None, PlatformSubmission.Flag.NO_LOCAL_ASSIGNMENT)
    assert report.matched == 0
    connection.check_constraints()


def test_unlisted_work_held_by_a_sync_after_its_worker_withdrew_keeps_no_row(published, monkeypatch):  # noqa: F811
    """Approved work whose session Prolific no longer lists is held by sync (``NOT_ON_PLATFORM``),
    a row naming its worker. Its worker withdraws after the sync read which work is unlisted: the
    hold is not stored. Before, the row kept the withdrawn worker's raw id for good."""
    study, study_id, server = published
    pid, session = hex24(), hex24()
    server.add_submission(study_id, participant_id=pid, submission_id=session)
    task = enter(study, study_id, pid=pid, session=session)
    assignment_approve(user=OPERATOR, study=study, assignment=task)  # paid: the withdrawal keeps an empty task
    del server.submissions[session]  # no longer listed
    minutes_pass(90, task)
    read = sync_service.publication_unlisted_work

    def read_then_withdraw(**kwargs):
        unlisted = read(**kwargs)
        participant_withdraw(user=OPERATOR, study=study, worker_id=pid)
        return unlisted

    monkeypatch.setattr(sync_service, "publication_unlisted_work", read_then_withdraw)

    study_sync(study=study)

    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.WITHDRAWN
    assert not PlatformSubmission.objects.filter(worker_id=pid).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sync_storing_the_session_of_a_worker_being_withdrawn_waits_and_stores_nothing(prolific, monkeypatch):
    """On PostgreSQL (READ COMMITTED), with the withdrawal still in its transaction: the sync's store
    of p1's session, a row nobody has locked because it does not exist yet, waits for the
    withdrawal, then reads it and stores nothing. Before, the store went ahead and failed at its
    commit on the task the withdrawal erased meanwhile (a foreign-key error ending the sync)."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    _platform, server = prolific
    study, pid = _published()
    session = server.add_submission(pid, participant_id="p1", status="ACTIVE")
    start_assignment(study, platform="prolific", worker_id="p1", assignment_id=session["id"], task_id=pid)

    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: participant_withdraw(user=OPERATOR, study=study, worker_id="p1"))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the study's withdrawal lock, not yet committed
    synced = Step(lambda: study_sync(study=study))
    synced.start()
    try:
        assert waits_on_a_lock(synced), "the sync did not wait for the withdrawal"
    finally:
        release.set()
    assert withdrawal.outcome().tasks_ended == 1
    assert synced.outcome().remote == 1

    assert not PlatformSubmission.objects.filter(worker_id="p1").exists()
    assert not Assignment.objects.filter(study=study).exists()
