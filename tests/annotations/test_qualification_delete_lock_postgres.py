"""A qualification test deleted while a worker is being graded on it, on PostgreSQL (READ
COMMITTED): ``qualification_test_delete`` locks the study's row ``FOR UPDATE``, then the test's,
before it asks whether the test was taken; ``qualification_submit`` holds the study's row ``FOR KEY
SHARE`` and the test's ``FOR UPDATE`` while it grades. So a delete waits for a grade in progress and
then finds the test taken (nothing deleted), and a grade that comes during a delete waits for it
and then finds no test. Before, the delete was Django's plain ``obj.delete()``: it waited for the
grade on the test's row, then deleted the test the worker had just taken.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import pytest

from annotations.models import Participant, QualificationGrant, QualificationTest
from annotations.services import qualification as qualification_service
from annotations.services.assignment import assignment_start
from annotations.services.errors import InvalidAnswer
from annotations.services.qualification import (
    QualificationSetupError,
    qualification_submit,
    qualification_test_delete,
    qualification_test_save,
)
from tests.annotations.factories import make_study
from tests.annotations.test_qualification_race_postgres import WAIT, Step, _needs_postgres, waits_on_a_lock  # noqa: F401
from tests.annotations.test_qualification_submit_lock_postgres import QUESTIONS, paused_in

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def taking():
    """(test, task, answers): a worker's task in a study whose test they are taking, and their right
    answers to it."""
    study = make_study(n_items=4, n_sources=1, quota=3, units_per_task=2)
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=2), user=None, questions=QUESTIONS)
    worker = Participant.objects.create(platform="link", external_id="plink-delete-1")
    task = assignment_start(study=study, participant=worker, consented=True)
    assert task.qualification_pending
    return test, task, {str(q.pk): q.correct_answer for q in test.questions.all()}


def test_a_qualification_test_delete_waits_for_a_grade_in_progress_and_is_then_refused(taking, monkeypatch):
    test, task, answers = taking
    reached, release = paused_in(qualification_service, "answer_is_correct", monkeypatch)
    submit = Step(lambda: qualification_submit(assignment=task, answers=answers))
    submit.start()
    try:
        assert reached.wait(WAIT)  # grading: the test's row is locked, the grant not written
        delete = Step(lambda: qualification_test_delete(test=test, user=None))
        delete.start()
        assert waits_on_a_lock(delete), "the delete did not wait for the grade in progress"
    finally:
        release.set()
    grant = submit.outcome()
    with pytest.raises(QualificationSetupError, match="can no longer be deleted"):
        delete.outcome()
    assert grant.passed
    assert QualificationTest.objects.filter(pk=test.pk).exists()


def test_a_qualification_grade_waits_for_a_delete_in_progress_and_finds_no_test(taking, monkeypatch):
    test, task, answers = taking
    reached, release = paused_in(qualification_service, "qualification_test_delete_check", monkeypatch)
    delete = Step(lambda: qualification_test_delete(test=test, user=None))
    delete.start()
    try:
        assert reached.wait(WAIT)  # checked and locked: not yet deleted
        submit = Step(lambda: qualification_submit(assignment=task, answers=answers))
        submit.start()
        assert waits_on_a_lock(submit), "the grade did not wait for the delete in progress"
    finally:
        release.set()
    delete.outcome()
    with pytest.raises(InvalidAnswer, match="qualification test was removed"):
        submit.outcome()
    assert not QualificationTest.objects.filter(pk=test.pk).exists()
    assert not QualificationGrant.objects.filter(study_id=test.study_id).exists()
