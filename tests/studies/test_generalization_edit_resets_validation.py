"""An edit of what a generalization question's validation judged (its item, type, text, answer or own
choices) sends a question marked valid or invalid back to unvalidated
(``studies.services.content.generalization_questions_validation_reset``), whichever writer makes it:
the admin's change form (``content_row_save``) or a re-import of a generalization file that changes
an answer and gives no status. The change is recorded as every change of a status is (who, when, the
status and the record replaced, why) and announced. A re-import that gives a status gives the file's
judgement of the new answer; an edit of a field no validation judged keeps the status.

Olga imports her draft generalization study's two questions as valid (the released files' way), then
edits one in the admin or imports a corrected file."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from studies.models import GeneralizationQuestion, Study
from studies.services.content import content_row_save
from studies.services.importers import generalization_questions_import
from studies.services.questions import generalization_questions_set_validation
from studies.signals import generalization_validation_changed
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.factories import staff

pytestmark = pytest.mark.django_db

VALID = GeneralizationQuestion.Validation.VALID
INVALID = GeneralizationQuestion.Validation.INVALID
UNVALIDATED = GeneralizationQuestion.Validation.UNVALIDATED


def _file(tmp_path, question: str, *, answer: str = "True", name: str = "generalisation_final_test.json"):
    path = tmp_path / name
    path.write_text(json.dumps({question: [["Is it so?", answer, "rephrase"],
                                           ["Is it not so?", "False", "counterfactual"]]}))
    return path


@pytest.fixture
def imported(tmp_path):
    """Olga's draft generalization study, its two questions imported as valid by her."""
    olga, client = staff("olga")
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=olga, n_items=1, n_sources=1, n_genq=0, quota=1,
                       units_per_task=2, status=Study.Status.DRAFT)
    item = study.items.get()
    generalization_questions_import(file=_file(tmp_path, item.question), dataset_name=study.dataset.name,
                                    validation_status=VALID, user=olga)
    question, other = GeneralizationQuestion.objects.filter(item=item).order_by("pk")
    assert (question.validation_status, question.metadata["validation"]["set_by"]) == (VALID, "import")
    return study, olga, client, question, other


@pytest.fixture
def announced():
    """The question ids ``generalization_validation_changed`` announces."""
    sent: list[list[int]] = []

    def receiver(sender, question_ids, **kwargs):
        sent.append(sorted(question_ids))

    generalization_validation_changed.connect(receiver, dispatch_uid="test_edit_resets_validation")
    yield sent
    generalization_validation_changed.disconnect(dispatch_uid="test_edit_resets_validation")


def _admin_edit(client, question, **changes):
    url = reverse("admin:studies_generalizationquestion_change", args=[question.pk])
    data = admin_form_data(client.get(url))
    response = client.post(url, {**data, **changes})
    assert response.status_code == 302, response.content.decode()[:2000]
    question.refresh_from_db()
    return question


@pytest.mark.parametrize(("field", "value"), [
    ("text", "Is it really so?"),
    ("answer", "no"),
    ("qtype", GeneralizationQuestion.Type.SIMILAR),
])
def test_an_admin_edit_of_a_judged_field_sends_a_valid_question_back_to_unvalidated(imported, announced, field,
                                                                                    value):
    _study, olga, client, question, other = imported
    imported_record = question.metadata["validation"]
    other_before = (other.validation_status, other.metadata)

    _admin_edit(client, question, **{field: value})

    assert getattr(question, field) == value
    assert question.validation_status == UNVALIDATED
    record = question.metadata["validation"]
    assert {k: record.get(k) for k in ("status", "previous", "set_by", "user_id", "username", "reason")} == {
        "status": UNVALIDATED, "previous": VALID, "set_by": "user", "user_id": olga.pk, "username": "olga",
        "reason": f"edited after validation: {field}"}
    # The import's judgement (its file and SHA-256) stays as history, no longer as the question's record.
    assert record["history"] == [{k: v for k, v in imported_record.items() if k != "history"}]
    assert announced == [[question.pk]]
    other.refresh_from_db()
    assert (other.validation_status, other.metadata) == other_before


def test_an_admin_edit_of_its_own_choices_sends_an_invalid_question_back_to_unvalidated(imported, announced):
    _study, olga, client, question, _other = imported
    generalization_questions_set_validation(questions=[question], status=INVALID, user=olga)
    question.refresh_from_db()
    choices = [{"label": "yes", "text": "Yes, surely"}, {"label": "no", "text": "No"}]

    _admin_edit(client, question, metadata=json.dumps({**question.metadata, "choices": choices}))

    assert question.metadata["choices"] == choices
    assert question.validation_status == UNVALIDATED
    record = question.metadata["validation"]
    assert (record["status"], record["previous"], record["reason"]) == (
        UNVALIDATED, INVALID, "edited after validation: choices")
    assert [e["status"] for e in record["history"]] == [VALID, INVALID]
    assert announced == [[question.pk], [question.pk]]


def test_an_edit_of_fields_not_judged_keeps_the_status_and_its_record(imported, announced):
    _study, _olga, client, question, _other = imported
    record = question.metadata["validation"]

    _admin_edit(client, question, origin="checked by hand",
                metadata=json.dumps({**question.metadata, "reviewer_note": "fine"}))

    assert (question.origin, question.metadata["reviewer_note"]) == ("checked by hand", "fine")
    assert (question.validation_status, question.metadata["validation"]) == (VALID, record)
    assert announced == []


def test_an_edit_of_an_unvalidated_question_records_nothing(imported, announced):
    _study, olga, _client, question, _other = imported
    generalization_questions_set_validation(questions=[question], status=UNVALIDATED, user=olga)
    question.refresh_from_db()
    record = question.metadata["validation"]
    announced.clear()
    question.text = "Is it really so?"

    content_row_save(user=olga, obj=question, changed=["text"])

    question.refresh_from_db()
    assert (question.text, question.validation_status, question.metadata["validation"]) == (
        "Is it really so?", UNVALIDATED, record)
    assert announced == []


def test_a_field_named_changed_but_as_stored_keeps_the_status(imported):
    _study, olga, _client, question, _other = imported

    content_row_save(user=olga, obj=question, changed=["text", "answer"])

    question.refresh_from_db()
    assert question.validation_status == VALID


def test_a_reimport_changing_the_answer_without_a_status_sends_the_question_back_to_unvalidated(
        imported, announced, tmp_path):
    study, olga, _client, question, other = imported
    imported_record = question.metadata["validation"]
    other_before = (other.validation_status, other.metadata)
    corrected = _file(tmp_path, study.items.get().question, answer="False", name="generalisation_fixed_test.json")

    record = generalization_questions_import(file=corrected, dataset_name=study.dataset.name, user=olga)

    question.refresh_from_db()
    assert (question.answer, question.validation_status) == ("no", UNVALIDATED)
    now = question.metadata["validation"]
    assert {k: now.get(k) for k in ("status", "previous", "set_by", "file", "sha256", "username", "reason")} == {
        "status": UNVALIDATED, "previous": VALID, "set_by": "import", "file": "generalisation_fixed_test.json",
        "sha256": record.sha256, "username": "olga", "reason": "edited after validation: answer"}
    assert now["history"] == [{k: v for k, v in imported_record.items() if k != "history"}]
    assert (record.summary["answers_changed"], record.summary["validation_reset"]) == (1, 1)
    assert announced == [[question.pk]]
    other.refresh_from_db()
    assert (other.validation_status, other.metadata) == other_before


def test_a_reimport_stating_valid_with_a_new_answer_keeps_valid_and_names_the_new_file(imported, announced,
                                                                                       tmp_path):
    study, olga, _client, question, _other = imported
    imported_record = question.metadata["validation"]
    corrected = _file(tmp_path, study.items.get().question, answer="False", name="generalisation_fixed_test.json")

    record = generalization_questions_import(file=corrected, dataset_name=study.dataset.name,
                                             validation_status=VALID, user=olga)

    question.refresh_from_db()
    assert (question.answer, question.validation_status) == ("no", VALID)
    now = question.metadata["validation"]
    # The file's judgement of the new answer, not the first file's of the old one.
    assert (now["status"], now["previous"], now["file"], now["sha256"]) == (
        VALID, VALID, "generalisation_fixed_test.json", record.sha256)
    assert now["sha256"] != imported_record["sha256"]
    assert now["history"] == [{k: v for k, v in imported_record.items() if k != "history"}]
    assert record.summary["validation_reset"] == 0
    assert announced == []


def test_a_reimport_of_the_same_answers_keeps_the_status(imported, tmp_path):
    study, olga, _client, question, _other = imported
    record = question.metadata["validation"]

    generalization_questions_import(file=_file(tmp_path, study.items.get().question, name="again_test.json"),
                                    dataset_name=study.dataset.name, user=olga)

    question.refresh_from_db()
    assert (question.validation_status, question.metadata["validation"]) == (VALID, record)


def test_a_reimport_judging_a_new_answer_needs_the_right_to_judge(imported, tmp_path):
    """A status given with a new answer is a judgement of the new question: refused, as a change of
    status is, to an importer without ``studies.change_generalizationquestion`` (before, one step
    recorded their judgement where two steps were refused)."""
    from django.contrib.auth.models import Permission

    from studies.services.importers import ImportValidationError

    study, olga, _client, question, _other = imported
    olga.user_permissions.remove(Permission.objects.get(codename="change_generalizationquestion"))
    olga = type(olga).objects.get(pk=olga.pk)
    corrected = _file(tmp_path, study.items.get().question, answer="False", name="generalisation_fixed_test.json")
    with pytest.raises(ImportValidationError, match="would judge this stored question 'valid'"):
        generalization_questions_import(file=corrected, dataset_name=study.dataset.name,
                                        validation_status=VALID, user=olga)
    question.refresh_from_db()
    assert (question.answer, question.validation_status, question.metadata["validation"]["set_by"]) == (
        "yes", VALID, "import")


def test_an_edit_of_the_original_question_sends_its_judged_questions_back_to_unvalidated(imported, announced):
    """A judge read each generalization question beside its original question: an edit of the item's
    question (or choices) leaves their judgements about another pair."""
    study, _olga, client, question, other = imported
    item = study.items.get()
    url = reverse("admin:studies_item_change", args=[item.pk])
    data = admin_form_data(client.get(url))
    response = client.post(url, {**data, "question": "A completely different original question?"})
    assert response.status_code == 302, response.content.decode()[:2000]
    for q in (question, other):
        q.refresh_from_db()
        assert q.validation_status == UNVALIDATED
        assert q.metadata["validation"]["reason"] == "edited after validation: original question"
    assert announced == [sorted([question.pk, other.pk])]

    # An edit of another field of the item keeps its questions' statuses as they are.
    generalization_questions_set_validation(questions=GeneralizationQuestion.objects.filter(pk=question.pk), status=VALID,
                                            user=None)
    data = admin_form_data(client.get(url))
    assert client.post(url, {**data, "gold_rationale": "Another gold rationale."}).status_code == 302
    question.refresh_from_db()
    assert question.validation_status == VALID


def test_a_reimport_of_items_changing_the_original_question_resets_its_judged_questions(imported, announced,
                                                                                      tmp_path):
    """The rule of the admin's item edit, for the other writer of an item's question: a re-import."""
    from studies.services.importers import items_import_strategyqa

    study, olga, _client, question, other = imported
    item = study.items.get()
    path = tmp_path / "strategyqa_rewritten.json"
    path.write_text(json.dumps([{"qid": item.external_id, "term": "t", "description": "d",
                                 "question": "A completely different original question?",
                                 "answer": item.gold_answer == "yes", "facts": ["f"]}]))
    record = items_import_strategyqa(file=path, dataset_name=study.dataset.name, split=item.split, user=olga)
    item.refresh_from_db()
    assert item.question == "A completely different original question?"
    for q in (question, other):
        q.refresh_from_db()
        assert q.validation_status == UNVALIDATED
        now = q.metadata["validation"]
        assert (now["reason"], now["set_by"], now["file"]) == (
            "edited after validation: original question", "import", "strategyqa_rewritten.json")
    assert record.summary["validation_reset"] == 2


def test_an_item_edit_writing_the_same_choices_otherwise_keeps_its_questions_judged():
    """Choices typed as ``(b)`` or ``B`` are the stored label ``b``: the same choices, no reset."""
    from studies.models import Dataset, Item

    dataset = Dataset.objects.create(name="mc", task_format=Dataset.TaskFormat.MULTIPLE_CHOICE)
    item = Item.objects.create(dataset=dataset, external_id="i1", question="Which?", gold_answer="a", split="test",
                               choices=[{"label": "a", "text": "Red"}, {"label": "b", "text": "Blue"}])
    question = GeneralizationQuestion.objects.create(item=item, text="Which colour?", answer="a",
                                                     qtype=GeneralizationQuestion.Type.REPHRASE)
    generalization_questions_set_validation(questions=[question], status=VALID, user=None)
    item.choices = [{"label": "A", "text": "Red"}, {"label": "(b)", "text": "Blue"}]
    content_row_save(user=None, obj=item, changed=["choices"])
    question.refresh_from_db()
    assert question.validation_status == VALID
