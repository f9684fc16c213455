"""A qualification test graded while its questions are being changed is graded against one set of
questions, on PostgreSQL (READ COMMITTED): ``qualification_submit`` locks the test's row ``FOR
UPDATE`` before it reads the questions and pass mark, the row ``qualification_questions_set`` (and
``qualification_test_save``) locks before it checks whether the test was taken and writes. Before,
the submit read the questions unlocked, so an edit that committed between that read and the grant
was accepted and the grant was scored against questions that no longer existed. Each order of the
two is played with threads, one paused inside its transaction while the other is shown waiting for
it (its backend waits on a lock).

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import threading

import pytest

from annotations.models import Participant, QualificationGrant, QualificationQuestion, QualificationTest
from annotations.services import qualification as qualification_service
from annotations.services.assignment import assignment_start
from annotations.services.errors import InvalidAnswer
from annotations.services.qualification import (
    QualificationSetupError,
    qualification_questions,
    qualification_submit,
    qualification_test_save,
)
from tests.annotations.factories import make_study
from tests.annotations.test_qualification_race_postgres import WAIT, Step, _needs_postgres, waits_on_a_lock  # noqa: F401

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUESTIONS = [{"question": f"Is the answer '{c}'? ({i})", "choices": ["yes", "no"], "correct_answer": c}
             for i, c in enumerate(["yes", "no", "yes"])]
NEW_QUESTIONS = [{"question": f"New question {i}", "choices": ["yes", "no"], "correct_answer": c}
                 for i, c in enumerate(["no", "yes", "no"])]


def paused_in(module, name: str, monkeypatch):
    """Make ``module.name`` pause once, after it ran, until released: (reached, release)."""
    reached, release = threading.Event(), threading.Event()
    original = getattr(module, name)

    def paused(*args, **kwargs):
        result = original(*args, **kwargs)
        if not reached.is_set():
            reached.set()
            assert release.wait(WAIT), "never released"
        return result

    monkeypatch.setattr(module, name, paused)
    return reached, release


@pytest.fixture
def taking():
    """(test, task, answers): a worker's task in a study whose test (pass mark 2 of 3, saved on the
    study page's path) they are taking, and their right answers to the test as shown to them."""
    study = make_study(n_items=4, n_sources=1, quota=3, units_per_task=2)
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=2), user=None, questions=QUESTIONS)
    worker = Participant.objects.create(platform="link", external_id="plink-lock-1")
    task = assignment_start(study=study, participant=worker, consented=True)
    assert task.qualification_pending
    answers = {str(q.pk): q.correct_answer for q in test.questions.all()}
    return test, task, answers


def test_an_edit_waits_for_a_grade_in_progress_and_is_then_refused(taking, monkeypatch):
    """The submit has read the questions and is grading (no grant yet): the edit waits for it, then
    finds the test taken and changes nothing; the grant refers to the test's questions."""
    test, task, answers = taking
    reached, release = paused_in(qualification_service, "answer_is_correct", monkeypatch)
    submit = Step(lambda: qualification_submit(assignment=task, answers=answers))
    submit.start()
    try:
        assert reached.wait(WAIT)  # grading: the questions are read, the grant not written
        edit = Step(lambda: qualification_service.qualification_questions_set(test=test, questions=NEW_QUESTIONS))
        edit.start()
        assert waits_on_a_lock(edit), "the edit did not wait for the grade in progress"
    finally:
        release.set()
    grant = submit.outcome()
    with pytest.raises(QualificationSetupError, match="Workers have already taken this qualification test"):
        edit.outcome()
    assert grant.passed and grant.score == 3
    stored = QualificationTest.objects.get(pk=test.pk)
    assert qualification_questions(stored) == QUESTIONS
    assert set(grant.answers) == {str(pk) for pk in QualificationQuestion.objects.filter(test=stored)
                                  .values_list("pk", flat=True)}


def test_a_grade_waits_for_an_edit_in_progress_and_reads_the_new_questions(taking, monkeypatch):
    """The edit has replaced the questions and is still in its transaction: the submit waits for it,
    then grades against the new questions, which the answers given do not answer (the worker's page
    showed the old ones): refused, and no grant is made."""
    test, task, answers = taking
    reached, release = paused_in(qualification_service, "qualification_questions_set", monkeypatch)
    edit = Step(lambda: qualification_test_save(test=test, user=None, questions=NEW_QUESTIONS))
    edit.start()
    try:
        assert reached.wait(WAIT)  # the questions are replaced: not committed
        submit = Step(lambda: qualification_submit(assignment=task, answers=answers))
        submit.start()
        assert waits_on_a_lock(submit), "the grade did not wait for the edit in progress"
    finally:
        release.set()
    edit.outcome()
    with pytest.raises(InvalidAnswer, match="Please answer question 1 of the test"):
        submit.outcome()
    assert not QualificationGrant.objects.filter(study_id=test.study_id).exists()
    assert qualification_questions(QualificationTest.objects.get(pk=test.pk)) == NEW_QUESTIONS


def test_a_grade_and_a_study_page_save_wait_for_each_other_without_a_deadlock():
    """The study page saves in one transaction: the study's row (``study_update``), then the test's
    (the inline's ``qualification_test_save``). A grade locked the task, then the test, and its
    grant's foreign key took the study's row last: the two deadlocked (one a 500). The grade now
    takes the study's row first (FOR KEY SHARE, as a claim does), so the page save waits for it."""
    from django.db import transaction

    from studies.models import Study

    study = make_study(n_items=4, n_sources=1, quota=3, units_per_task=2)
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=QUESTIONS)
    worker = Participant.objects.create(platform="link", external_id="plink-deadlock-1")
    task = assignment_start(study=study, participant=worker, consented=True)
    answers = {str(q.pk): q.correct_answer for q in test.questions.all()}

    reached, release = threading.Event(), threading.Event()
    original = qualification_service.answer_is_correct

    def paused(*args, **kwargs):
        if not reached.is_set():
            reached.set()
            assert release.wait(WAIT)
        return original(*args, **kwargs)

    def page_save():  # the admin's change form: study_update's lock, then the inline's save
        with transaction.atomic():
            Study.objects.select_for_update().get(pk=study.pk)
            edited = QualificationTest.objects.get(pk=test.pk)
            edited.instructions = "Edited instructions"
            qualification_test_save(test=edited, user=None)

    qualification_service.answer_is_correct = paused
    try:
        grade = Step(lambda: qualification_submit(assignment=task, answers=answers))
        grade.start()
        assert reached.wait(WAIT)  # the grade holds the study (key share), the task and the test
        page = Step(page_save)
        page.start()
        assert waits_on_a_lock(page)  # the page waits for the grade, at the study's row
        release.set()
        grade.join(WAIT)
        page.join(WAIT)
    finally:
        qualification_service.answer_is_correct = original
    assert grade.error is None and page.error is None, (grade.error, page.error)
    assert QualificationGrant.objects.get(participant=worker).passed
    assert QualificationTest.objects.get(pk=test.pk).instructions == "Edited instructions"
