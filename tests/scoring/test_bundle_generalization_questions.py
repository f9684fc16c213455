"""A bundle's generalization questions are checked by the model's own rule (``GeneralizationQuestion.clean``
through ``full_clean``) when the import makes them: a bundle edited and signed again so that a question
offers metadata choices of 5, has an answer that is not one of its choices, or an unknown type or
validation status is refused naming data/generalization_questions.csv, the row and the field, and
nothing is written. A question the model accepts (its own choices, its answer one of them) is made."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from scoring.services.bundle import BundleError, bundle_import
from studies.models import GeneralizationQuestion, Platform, Study
from tests.annotations.factories import make_study
from tests.scoring.test_bundle import _bundle, _edited_rows
from tests.work import work

pytestmark = pytest.mark.django_db

QUESTIONS = "data/generalization_questions.csv"


@pytest.fixture
def bundle() -> bytes:
    """A generalization study of two yes/no items, two questions each, answered by one worker."""
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_sources=1, n_genq=2, quota=1, units_per_task=4,
                       name="genq-origin")
    work(study, "GEN0", platform=Platform.LINK)
    return _bundle(study)


def _edited(data: bytes, *edits: tuple[int, dict]) -> bytes:
    """The bundle with rows of data/generalization_questions.csv given new cells, signed again."""
    return _edited_rows(data, QUESTIONS, *edits)


def _import(data: bytes) -> Study:
    return bundle_import(file=io.BytesIO(data), name="genq-copy", filename="study.zip", owner=None)


def _refused(data: bytes):
    """The import's first error; no study and no question was made."""
    studies, questions = Study.objects.count(), GeneralizationQuestion.objects.count()
    with pytest.raises(BundleError) as refused:
        _import(data)
    assert (Study.objects.count(), GeneralizationQuestion.objects.count()) == (studies, questions)
    return refused.value.errors[0]


NEW = "An edited question?"


@pytest.mark.parametrize(("cells", "field", "says"), [
    ({"metadata": json.dumps({"choices": 5})}, "metadata", 'metadata "choices": must be a list'),
    ({"metadata": json.dumps({"choices": ["only"]})}, "metadata", "at least two choices, not 1"),
    ({"answer": "maybe"}, "answer", "'maybe' is not one of the choices (yes, no)"),
    ({"metadata": json.dumps({"choices": ["A", "B"]})}, "answer", "'yes' is not one of the choices (A, B)"),
    ({"type": "paraphrase"}, "type", "'paraphrase' is not a question type"),
    ({"validation_status": "approved"}, "validation_status", "'approved' is not a validation status"),
], ids=["choices-5", "one-choice", "answer-not-yes-no", "answer-not-its-choice", "type", "validation-status"])
def test_a_question_the_model_refuses_stops_the_import_naming_its_row_and_field(bundle, cells, field, says):
    error = _refused(_edited(bundle, (1, {"text": NEW, **cells})))

    assert (error.record, error.line, error.field) == (QUESTIONS, 3, field)
    assert says in error.reason
    assert not GeneralizationQuestion.objects.filter(text=NEW).exists()


def test_a_question_given_twice_is_refused_naming_the_second_row(bundle):
    row = next(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(bundle)).read(QUESTIONS).decode())))
    first = {"item_id": row["item_id"], "type": row["type"], "text": NEW}

    error = _refused(_edited(bundle, (0, first), (1, first)))

    assert (error.record, error.line, error.field) == (QUESTIONS, 3, "text")


def test_a_question_with_its_own_choices_and_one_of_them_as_answer_is_made(bundle):
    choices = [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}, {"label": "unsure", "text": "Unsure"}]

    copy = _import(_edited(bundle, (1, {"text": NEW, "answer": "unsure", "metadata": json.dumps({"choices": choices})})))

    question = GeneralizationQuestion.objects.get(text=NEW)
    assert (question.answer, question.metadata) == ("unsure", {"choices": choices})
    assert copy.units.filter(generalization_question=question).exists()


def test_a_question_here_with_other_choices_is_the_question_rows_error(bundle):
    """Imported where the study was made, each question is found here by (item, type, text): one
    whose choices the bundle gives otherwise is refused on its own row, not on every answer to it."""
    error = _refused(_edited(bundle, (0, {"metadata": json.dumps({"choices": ["yes", "no", "maybe"]})})))

    assert (error.record, error.line, error.field) == (QUESTIONS, 2, "metadata")
    assert "differs from this generalization question here" in error.reason


@pytest.mark.parametrize("batch", [1, 5000], ids=["rows-in-batches-of-one", "one-batch"])
def test_a_question_given_twice_is_refused_whatever_the_batches_and_whether_it_is_here(bundle, monkeypatch, batch):
    """Given twice across two batches of rows, or twice as a question that is here already: the
    second row is refused as given twice (the check was per batch, and only of new questions)."""
    monkeypatch.setattr("scoring.services.bundle.importing.BATCH", batch)
    row = next(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(bundle)).read(QUESTIONS).decode())))
    again = {"item_id": row["item_id"], "type": row["type"], "text": row["text"]}  # the first row's question

    error = _refused(_edited(bundle, (1, again)))

    assert (error.record, error.line, error.field, error.reason) == (QUESTIONS, 3, "text",
                                                                      "given twice for this item and type")
