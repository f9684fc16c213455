"""A choice written with surrounding white space ("Paris ", "Yes ") is offered, answered and graded
as its label without it (``studies.choices.as_label``, the one rule ``normalise_choices``, the answer
check, the qualification grading and ``answer_is_correct`` read labels by). Before, a plain-string
choice kept its spaces on the worker's page while the answer check trimmed the answer: the audit's
probe (``metadata={"choices": ["Paris ", "London"]}``) passed ``full_clean`` and answering "Paris "
was refused as "'Paris' is not one of the choices". A right answer written with the spaces is
refused when it is set up, naming its field and the label to write, so stored right answers are
labels as offered (the grading, the reviewers' list and scoring compare them exactly); one stored
before that check is written as its label by a data migration (annotations 0032, studies 0024)."""
from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
from django.test import Client

from annotations.models import (
    Annotation,
    AttentionCheck,
    QualificationGrant,
    QualificationQuestion,
    QualificationTest,
)
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.qualification import (
    QualificationSetupError,
    attention_check_save,
    qualification_test_save,
)
from studies.models import GeneralizationQuestion, GenUPrediction, Item, Study
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import answer, entry_url, form_fields, start, task_of
from tests.factories import GeneralizationQuestionFactory

pytestmark = pytest.mark.django_db

CHECK = "ATTENTION: choose Yes"


def offered(page: str, name: str) -> list[str]:
    """The values of the radio buttons named ``name`` on a worker page: what a browser can send."""
    return re.findall(rf'type="radio" name="{name}" id="[^"]*" value="([^"]*)"', page)


def genq_study(*, choices: list, answer: str) -> tuple[Study, GeneralizationQuestion]:
    """A generalization study of one item whose one question offers ``choices`` of its own, checked
    by the model's rule (``full_clean``, as the admin checks it) before the study opens."""
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=0, units_per_task=1,
                       quota=1, status=Study.Status.DRAFT)
    question = GeneralizationQuestionFactory.build(item=Item.objects.get(dataset=study.dataset), answer=answer,
                                                   text="GENQ: the capital of England?", metadata={"choices": choices})
    question.full_clean()
    question.save()
    return study_open(study=study, user=OPERATOR), question


@pytest.mark.parametrize("sent", ["Paris", "Paris "], ids=["as-offered", "as-written"])
def test_a_generalization_choice_with_a_trailing_space_can_be_answered(sent):
    study, _question = genq_study(choices=["Paris ", "London"], answer="London")
    client = Client()
    task = start(client, entry_url(study))
    assert offered(client.get(task).content.decode(), "answer") == ["Paris", "London"]
    _fields, response = answer(client, task, sent)  # before
    assert response.status_code == 302, response.content.decode()[:300]
    _fields, response = answer(client, task, "London")  # after
    assert response.status_code == 302, response.content.decode()[:300]
    assert list(Annotation.objects.filter(claim__assignment=task_of(task)).order_by("step")
                .values_list("step", "answer")) == [("after", "London"), ("before", "Paris")]


def test_a_generalization_answer_with_a_trailing_space_is_refused_naming_the_label():
    with pytest.raises(ValidationError) as refused:
        genq_study(choices=["Paris ", "London"], answer="Paris ")
    assert refused.value.message_dict == {"answer": ["'Paris ' is not one of the choices (Paris, London): "
                                                     "write 'Paris', without the white space around it."]}


def _answer_the_check(check: AttentionCheck) -> dict:
    """A worker's task with ``check`` between its two units; the check answered with the label the
    page offers for "Yes": the stored check answer's payload."""
    client = Client()
    task = start(client, entry_url(check.study))
    answer(client, task, "yes")
    answer(client, task, "yes")  # the first unit done: the check is the next question
    page = client.get(task).content.decode()
    assert CHECK in page and offered(page, "answer") == ["Yes", "No"]
    response = client.post(task + "answer", {**form_fields(page), "answer": "Yes"})
    assert response.status_code == 302, response.content.decode()[:300]
    return Annotation.objects.get(step=Annotation.Step.ATTENTION).payload


def test_an_attention_check_choice_with_a_trailing_space_is_answered_and_graded():
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    check = attention_check_save(check=AttentionCheck(study=study, question=CHECK, choices=["Yes ", "No"],
                                                      correct_answer="Yes"), user=None)
    assert _answer_the_check(check) == {"correct": True}


def test_an_attention_check_right_answer_with_a_trailing_space_is_refused_naming_the_field():
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    with pytest.raises(ValidationError) as refused:
        attention_check_save(check=AttentionCheck(study=study, question=CHECK, choices=["Yes ", "No"],
                                                  correct_answer="Yes "), user=None)
    assert refused.value.message_dict == {"correct_answer": ["'Yes ' is not one of the choices (Yes, No): "
                                                             "write 'Yes', without the white space around it."]}
    assert not AttentionCheck.objects.exists()


def test_an_attention_check_or_test_question_label_longer_than_an_answer_holds_is_refused_naming_it():
    """An answer stores its label (50 characters): before, a check offering a longer distractor was
    saved, and a worker who chose it got a 400 each time (the answer form takes 50)."""
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    long = "x" * 51
    with pytest.raises(ValidationError) as refused:
        attention_check_save(check=AttentionCheck(study=study, question=CHECK, choices=["Yes", long],
                                                  correct_answer="Yes"), user=None)
    assert list(refused.value.message_dict) == ["choices"]
    assert "the label of choice 2 is 51 characters, at most 50" in refused.value.message_dict["choices"][0]
    with pytest.raises(QualificationSetupError, match="Question 1.*the label of choice 2 is 51 characters"):
        qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=[
            {"question": "Choose Yes", "choices": ["Yes", long], "correct_answer": "Yes"}])
    assert not AttentionCheck.objects.exists() and not QualificationTest.objects.filter(study=study).exists()


def _migrated(app: str, name: str, function: str) -> None:
    """Run a data migration's function on the database as it is now."""
    getattr(importlib.import_module(f"{app}.migrations.{name}"), function)(django_apps, None)


def test_a_check_stored_before_the_rule_with_a_trailing_space_right_answer_grades_that_choice_right():
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    # written as it was stored before the rule refused it (no service writes it today); the data
    # migration writes its right answer as the label offered, which the grading compares exactly
    check = AttentionCheckFactory(study=study, question=CHECK, choices=["Yes ", "No"], correct_answer="Yes ")
    _migrated("annotations", "0032_trim_correct_answers", "trim_correct_answers")
    check.refresh_from_db()
    assert check.correct_answer == "Yes"
    assert _answer_the_check(check) == {"correct": True}


def _take_test(study: Study) -> QualificationGrant:
    client = Client()
    task = start(client, entry_url(study))
    question = QualificationQuestion.objects.get(test__study=study)
    assert offered(client.get(task).content.decode(), f"q_{question.pk}") == ["Yes", "No"]
    assert client.post(task + "qualification", {f"q_{question.pk}": "Yes"}).status_code == 302
    return QualificationGrant.objects.get(study=study)


def test_a_qualification_choice_with_a_trailing_space_is_answered_and_graded():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=[
        {"question": "Choose Yes", "choices": ["Yes ", "No"], "correct_answer": "Yes"}])
    grant = _take_test(study)
    assert (grant.passed, grant.score, list(grant.answers.values())) == (True, 1, ["Yes"])


def test_a_qualification_right_answer_with_a_trailing_space_is_refused_naming_the_question():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    with pytest.raises(QualificationSetupError, match=re.escape(
            "Question 1, correct answer: 'Yes ' is not one of the choices (Yes, No): write 'Yes', without the "
            "white space around it.")):
        qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=[
            {"question": "Choose Yes", "choices": ["Yes ", "No"], "correct_answer": "Yes "}])
    assert not QualificationTest.objects.filter(study=study).exists()


def test_a_qualification_question_stored_before_the_rule_grades_that_choice_right():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    # written as it was stored before the rule refused it (no service writes it today)
    test = QualificationTest.objects.create(study=study, pass_mark=1)
    QualificationQuestion.objects.create(test=test, position=0, question="Choose Yes", choices=["Yes ", "No"],
                                         correct_answer="Yes ")
    _migrated("annotations", "0032_trim_correct_answers", "trim_correct_answers")
    assert QualificationQuestion.objects.get(test=test).correct_answer == "Yes"
    grant = _take_test(study)
    assert (grant.passed, grant.score) == (True, 1)


def test_a_generalization_answer_stored_before_the_rule_is_written_as_its_label():
    study, question = genq_study(choices=["Paris ", "London"], answer="London")
    GeneralizationQuestion.objects.filter(pk=question.pk).update(answer="Paris ")  # as stored before the rule
    # Gen-U predictions graded against the spaced answer: "Paris" wrong, as the exact rule graded it
    source = study.sources.first()
    graded = {predicted: GenUPrediction.objects.create(
        generalization_question=question, rationale_source=source, answerer=answerer, answerer_model="m",
        predicted_answer=predicted, correct=False) for answerer, predicted in (("I", "Paris"), ("IR", ""))}
    _migrated("studies", "0024_trim_generalization_answers", "trim_generalization_answers")
    question.refresh_from_db()
    assert question.answer == "Paris"
    question.full_clean()  # a right answer the page offers
    # graded again against the answer as written now (a blank prediction stays wrong)
    assert {p: GenUPrediction.objects.get(pk=row.pk).correct for p, row in graded.items()} == {"Paris": True, "": False}


def test_a_right_answer_of_white_space_only_is_left_for_a_person():
    study, question = genq_study(choices=["Paris", "London"], answer="London")
    GeneralizationQuestion.objects.filter(pk=question.pk).update(answer="  ")  # only around full_clean
    check = AttentionCheckFactory(study=make_study(n_items=4, n_sources=1, units_per_task=2), question=CHECK,
                                  choices=["Yes", "No"], correct_answer=" ")
    _migrated("studies", "0024_trim_generalization_answers", "trim_generalization_answers")
    _migrated("annotations", "0032_trim_correct_answers", "trim_correct_answers")
    question.refresh_from_db()
    check.refresh_from_db()
    assert (question.answer, check.correct_answer) == ("  ", " ")  # no label to write; never saved empty
