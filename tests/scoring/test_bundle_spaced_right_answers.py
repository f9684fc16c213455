"""A bundle made before a right answer with white space around it was refused ("no " for the
choice "no ", offered and answered as "no": ``studies.choices.as_label``) still imports: the import
reads its right answers as the labels they name (``importing._right_answer``), as the data
migrations wrote the stored ones (annotations 0032, studies 0024). Before, such a bundle was refused
("'no ' is not one of the choices (yes, no): write 'no' ...")."""
from __future__ import annotations

import io
import json
import zipfile

import pytest

from annotations.models import AttentionCheck
from scoring.services.bundle import bundle_import, bundle_stream
from studies.models import GeneralizationQuestion, GenUPrediction, Study
from tests.annotations.factories import make_study
from tests.scoring.test_bundle import _edited_rows, _resign, _rewrite, _worked_study

pytestmark = pytest.mark.django_db


def _spaced(content: bytes) -> bytes:
    """study.json as an installation before the rule wrote it: the check's right answer and its
    choice label with a trailing space."""
    design = json.loads(content)
    for check in design["attention_checks"]:
        check["correct_answer"] += " "
        check["choices"] = [{**c, "label": c["label"] + " "} if c["label"] == check["correct_answer"].strip() else c
                            for c in check["choices"]]
    return json.dumps(design).encode()


def test_a_bundle_with_a_spaced_right_answer_imports_with_its_label():
    study = _worked_study()
    data = _resign(_rewrite(b"".join(bundle_stream(study=study, user=None)), "study.json", _spaced))
    design = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("study.json"))
    assert [c["correct_answer"] for c in design["attention_checks"]] == ["no "]  # the edit is in the bundle
    copy = bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    check = AttentionCheck.objects.get(study=copy)
    assert check.correct_answer == "no"


def test_a_bundle_graded_against_a_spaced_answer_imports_beside_its_migrated_questions():
    # Imported back where its questions already are (the same dataset), after the migration wrote
    # their answers as labels and graded their Gen-U predictions again: the bundle's own grades
    # (against "yes ") differ from those here, and the import refused every prediction as
    # "differs from this Gen-U prediction here". A grade follows from the prediction and the answer.
    study = make_study(n_items=2, n_sources=1, status=Study.Status.CLOSED)
    source = study.sources.get()
    questions = list(GeneralizationQuestion.objects.filter(item__dataset=study.dataset))
    for q in questions:
        GenUPrediction.objects.create(generalization_question=q, rationale_source=source, answerer="I",
                                      answerer_model="m", predicted_answer=q.answer, correct=True)
    data = b"".join(bundle_stream(study=study, user=None))
    data = _edited_rows(data, "data/generalization_questions.csv",
                        *[(i, {"answer": q.answer + " "}) for i, q in enumerate(questions)])
    data = _edited_rows(data, "data/genu_predictions.csv", *[(i, {"correct": "false"}) for i in range(len(questions))])
    copy = bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    assert copy.dataset_id == study.dataset_id
    assert set(GenUPrediction.objects.values_list("correct", flat=True)) == {True}
