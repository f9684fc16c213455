"""A qualification test added to an open study while a worker's task is being started holds that
task too, on PostgreSQL (READ COMMITTED): the start reads whether the study has a test under a
``FOR KEY SHARE`` lock of the study's row, and ``qualification_test_save`` locks that row ``FOR
UPDATE`` before it creates the test and marks the tasks in progress. Each order of the two is
played with threads, one paused inside its transaction while the other is shown waiting for it
(its backend waits on a lock). Starts of different workers do not wait for each other.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections

from annotations.models import Assignment, QualificationTest
from annotations.services import assignment as assignment_service
from annotations.services import qualification as qualification_service
from annotations.services.assignment import assignment_start
from annotations.services.qualification import qualification_test_save
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUESTIONS = [{"question": "Is Paris in France?", "choices": ["yes", "no"], "correct_answer": "yes"}]
WAIT = 10  # seconds any step may take before the test gives up


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


class Step(threading.Thread):
    """Runs ``work()`` on its own connection; keeps its result or error and its backend's pid."""

    def __init__(self, work):
        super().__init__(daemon=True)
        self.work, self.result, self.error, self.pid = work, None, None, None
        self.started_work = threading.Event()

    def run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.started_work.set()
            self.result = self.work()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        finally:
            connections.close_all()

    def outcome(self):
        self.join(WAIT)
        assert not self.is_alive(), "a step hung"
        if self.error is not None:
            raise self.error
        return self.result


def waits_on_a_lock(step: Step) -> bool:
    """Whether ``step``'s backend comes to wait on a lock (``False`` when it finishes first)."""
    assert step.started_work.wait(WAIT)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and step.is_alive():
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [step.pid])
            row = cursor.fetchone()
        if row is not None and row[0] == "Lock":
            return True
        time.sleep(0.01)
    return False


def paused_after(module, name: str, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make ``module.name`` pause after it ran, until released: (reached, release)."""
    reached, release = threading.Event(), threading.Event()
    original = getattr(module, name)

    def paused(*args, **kwargs):
        result = original(*args, **kwargs)
        reached.set()
        assert release.wait(WAIT), "never released"
        return result

    monkeypatch.setattr(module, name, paused)
    return reached, release


def new_test(study) -> QualificationTest:
    return qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=QUESTIONS)


def test_a_test_added_while_a_task_starts_waits_for_it_and_holds_it(monkeypatch):
    """The start has read "no test" and is still in its transaction: the test's save waits for it,
    then marks its task with the others."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    worker = ParticipantFactory()
    reached, release = paused_after(assignment_service, "_qualification_pending", monkeypatch)
    start = Step(lambda: assignment_start(study=study, participant=worker))
    start.start()
    try:
        assert reached.wait(WAIT)  # the start read the study's test: none yet
        save = Step(lambda: new_test(study))
        save.start()
        assert waits_on_a_lock(save), "the test's save did not wait for the task being started"
    finally:
        release.set()
    task = start.outcome()
    save.outcome()
    assert Assignment.objects.get(pk=task.pk).qualification_pending


def test_a_task_started_while_a_test_is_added_waits_for_it_and_is_held(monkeypatch):
    """The test's save has created the test and marked the tasks in progress and is still in its
    transaction: the start waits for it, then finds the test."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    worker = ParticipantFactory()
    reached, release = paused_after(qualification_service, "qualification_tasks_hold", monkeypatch)
    save = Step(lambda: new_test(study))
    save.start()
    try:
        assert reached.wait(WAIT)  # the test is created, the tasks in progress marked: not committed
        start = Step(lambda: assignment_start(study=study, participant=worker))
        start.start()
        assert waits_on_a_lock(start), "the task's start did not wait for the test being added"
    finally:
        release.set()
    save.outcome()
    task = start.outcome()
    assert Assignment.objects.get(pk=task.pk).qualification_pending


def test_tasks_of_different_workers_start_without_waiting_for_each_other(monkeypatch):
    """Each start holds a lock of the study's row to its end, a shared one: a second worker's start
    goes through while the first is paused in its transaction."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    first, second = ParticipantFactory(), ParticipantFactory()
    reached, release = paused_after(assignment_service, "_qualification_pending", monkeypatch)
    paused = Step(lambda: assignment_start(study=study, participant=first))
    paused.start()
    try:
        assert reached.wait(WAIT)
        monkeypatch.undo()  # the second start runs as it is
        other = Step(lambda: assignment_start(study=study, participant=second))
        other.start()
        task = other.outcome()
        assert paused.is_alive()  # the first is still paused in its transaction
    finally:
        release.set()
    assert task.participant_id == second.pk and not task.qualification_pending
    assert paused.outcome().participant_id == first.pk
