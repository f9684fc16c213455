"""A re-import of a generalization-question file that changes a question's validation status records
it as the admin's validation actions do (``studies.services.questions.validation_provenance``): the
import as the judge (file name, SHA-256, who ran it), the status it replaced and every earlier
judgement in the history, and the rest of the question's metadata is kept.

Olga imports her generalization study's two questions as valid, notes something on one in the admin,
opens the study, has it answered and closes it; carl (a CHANGE share) marks that question invalid. Olga
then imports the file again as valid: the question is valid again, and nothing of carl's judgement or
her note is lost. A validation status stays changeable on a closed study; its answer does not."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from studies.models import GeneralizationQuestion, ImportRecord, Study, StudyShare
from studies.services.importers import ImportValidationError, generalization_questions_import
from studies.services.questions import generalization_questions_set_validation
from studies.services.sharing import study_share
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.factories import staff
from tests.work import work

pytestmark = pytest.mark.django_db

VALID = GeneralizationQuestion.Validation.VALID
INVALID = GeneralizationQuestion.Validation.INVALID
UNVALIDATED = GeneralizationQuestion.Validation.UNVALIDATED
NOTE = {"reviewer_note": "Checked against the original by hand."}


def _file(tmp_path, question: str, *, answer: str = "True"):
    path = tmp_path / "generalisation_final_test.json"
    path.write_text(json.dumps({question: [["Is it so?", answer, "rephrase"],
                                           ["Is it not so?", "False", "counterfactual"]]}))
    return path


@pytest.fixture
def judged(tmp_path):
    """Olga's closed generalization study, its questions imported as valid by her; she noted
    something in the first question's metadata in the admin before opening it; carl, holding a
    CHANGE share, then marked that question invalid."""
    olga, olga_client = staff("olga")
    carl, _ = staff("carl")
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=olga, n_items=1, n_sources=1, n_genq=0, quota=1,
                       units_per_task=2, status=Study.Status.DRAFT)
    item = study.items.get()
    path = _file(tmp_path, item.question)
    generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=VALID, user=olga)
    question, other = GeneralizationQuestion.objects.filter(item=item).order_by("pk")
    url = reverse("admin:studies_generalizationquestion_change", args=[question.pk])
    data = admin_form_data(olga_client.get(url))
    edited = olga_client.post(url, {**data, "metadata": json.dumps({**question.metadata, **NOTE})})
    assert edited.status_code == 302
    study = study_open(study=study, user=OPERATOR)
    work(study, "5a9d64f5f6dfdd0001eaa73d")
    study_close(user=OPERATOR, study=study)
    study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)
    generalization_questions_set_validation(user=carl, questions=[question], status=INVALID)
    question.refresh_from_db()
    other.refresh_from_db()
    assert question.metadata["reviewer_note"] == NOTE["reviewer_note"]
    return study, path, olga, carl, question, other


def test_a_reimport_changing_the_status_records_it_and_keeps_the_history_and_the_rest(judged):
    study, path, olga, carl, question, other = judged
    before = question.metadata
    carls = before["validation"]
    imported = carls["history"][0]
    assert (carls["status"], carls["set_by"], carls["username"]) == (INVALID, "user", "carl")
    assert (imported["status"], imported["set_by"]) == (VALID, "import")
    other_before = (other.validation_status, other.metadata, other.origin)

    record = generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=VALID,
                                             user=olga)

    question.refresh_from_db()
    assert (record.created, record.updated, record.unchanged) == (0, 1, 1)
    assert question.validation_status == VALID
    now = question.metadata["validation"]
    assert {k: now.get(k) for k in ("status", "previous", "set_by", "file", "sha256", "user_id", "username")} == {
        "status": VALID, "previous": INVALID, "set_by": "import", "file": "generalisation_final_test.json",
        "sha256": record.sha256, "user_id": olga.pk, "username": "olga"}
    assert now["at"] > carls["at"]
    # Carl's judgement and the first import's stay, oldest first; the rest of the metadata is as it was.
    assert now["history"] == [imported, {k: v for k, v in carls.items() if k != "history"}]
    assert {k: v for k, v in question.metadata.items() if k != "validation"} == {
        k: v for k, v in before.items() if k != "validation"}
    assert question.metadata["reviewer_note"] == NOTE["reviewer_note"]
    other.refresh_from_db()
    assert (other.validation_status, other.metadata, other.origin) == other_before  # already valid: untouched


def test_a_reimport_by_a_command_names_the_import_and_no_user(judged):
    study, path, _olga, _carl, question, _other = judged

    generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=UNVALIDATED)

    question.refresh_from_db()
    record = question.metadata["validation"]
    assert (question.validation_status, record["status"], record["previous"], record["set_by"]) == (
        UNVALIDATED, UNVALIDATED, INVALID, "import")
    assert "user_id" not in record and len(record["history"]) == 2


def test_a_reimport_may_not_change_a_closed_studys_answer_and_changes_nothing(judged, tmp_path):
    study, _path, olga, _carl, question, other = judged
    before = [(q.answer, q.validation_status, q.metadata) for q in (question, other)]
    records = ImportRecord.objects.count()
    changed = _file(tmp_path, study.items.get().question, answer="False")

    with pytest.raises(ImportValidationError) as refused:
        generalization_questions_import(file=changed, dataset_name=study.dataset.name, validation_status=VALID,
                                        user=olga)

    assert [e.field for e in refused.value.errors] == ["answer, validation_status"]
    for q in (question, other):
        q.refresh_from_db()
    assert [(q.answer, q.validation_status, q.metadata) for q in (question, other)] == before
    assert ImportRecord.objects.count() == records
