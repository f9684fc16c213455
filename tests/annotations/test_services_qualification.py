"""``annotations.services.qualification.qualification_test_save`` refuses a test no worker can pass
(or one everyone passes), whatever page or caller saves it, beside the write and once its questions
are written: at least one question, a pass mark from 1 to their number (``qualification_test_problem``).
A refusal saves nothing, neither the test nor its questions."""
from __future__ import annotations

import pytest

from annotations.models import QualificationTest
from annotations.services.qualification import (
    QualificationSetupError,
    qualification_questions,
    qualification_test_problem,
    qualification_test_save,
)
from tests.annotations.factories import make_study

pytestmark = pytest.mark.django_db

QUESTIONS = [{"question": f"Is {city} in France?", "choices": ["yes", "no"], "correct_answer": answer}
             for city, answer in (("Paris", "yes"), ("Rome", "no"), ("Lyon", "yes"))]


@pytest.mark.parametrize(("pass_mark", "questions", "message"), [
    (5, QUESTIONS, r"The pass mark is higher than the number of questions \(3\)\."),
    (0, QUESTIONS, r"The pass mark is at least 1"),
    (1, [], r"Write at least one question\."),
    (1, None, r"Write at least one question\."),
])
def test_a_new_test_no_worker_can_pass_is_refused_and_nothing_saved(pass_mark, questions, message):
    study = make_study(n_items=2, n_sources=1)
    with pytest.raises(QualificationSetupError, match=message):
        qualification_test_save(test=QualificationTest(study=study, pass_mark=pass_mark), user=None,
                                questions=questions)
    assert not QualificationTest.objects.filter(study=study).exists()


def test_an_edit_no_worker_can_pass_is_refused_and_rolled_back():
    study = make_study(n_items=2, n_sources=1)
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=3), user=None, questions=QUESTIONS)
    with pytest.raises(QualificationSetupError, match=r"higher than the number of questions \(2\)"):
        qualification_test_save(test=test, user=None, questions=QUESTIONS[:2])  # fewer questions than the mark
    assert qualification_questions(test) == QUESTIONS  # the questions written before the check are rolled back
    test.pass_mark = 4
    with pytest.raises(QualificationSetupError, match=r"higher than the number of questions \(3\)"):
        qualification_test_save(test=test, user=None)  # the stored questions are judged
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 3


def test_a_passable_test_saves():
    study = make_study(n_items=2, n_sources=1)
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=3), user=None, questions=QUESTIONS)
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 3
    assert qualification_questions(test) == QUESTIONS


def test_the_rule_names_the_field_it_judges():
    assert qualification_test_problem(pass_mark=2, question_count=0) == ("questions", "Write at least one question.")
    assert qualification_test_problem(pass_mark=None, question_count=2) is None  # no pass mark given: not judged
    assert qualification_test_problem(pass_mark=4, question_count=3)[0] == "pass_mark"
    assert qualification_test_problem(pass_mark=3, question_count=3) is None
