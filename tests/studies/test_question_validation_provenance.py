"""Who marked a generalization question valid or invalid, when, and what it was before
(``studies.services.questions.generalization_questions_set_validation``, the one writer of a
question's validation status once it exists).

Olga's generalization study was opened, answered through the questionnaire's services and closed;
its questions were imported as valid (``metadata["validation"]`` names the file). Carl holds a
CHANGE share on it and marks a question invalid and valid again in the admin: each change records
him, the time and the status it replaced, the judgements replaced stay in a bounded history, and
the admin keeps a log entry per change."""
from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import CHANGE as LOGGED_CHANGE
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from studies.models import GeneralizationQuestion, Study, StudyShare
from studies.services.content import ContentNotYours
from studies.services.importers import generalization_questions_import
from studies.services.questions import generalization_questions_set_validation
from studies.services.sharing import study_share
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.factories import staff
from tests.work import work

pytestmark = pytest.mark.django_db

VALID = GeneralizationQuestion.Validation.VALID
INVALID = GeneralizationQuestion.Validation.INVALID
CHANGELIST = "admin:studies_generalizationquestion_changelist"
HISTORY_KEPT = 20  # studies.services.questions.VALIDATION_HISTORY_MAX


@pytest.fixture
def closed_study(tmp_path):
    """Olga's closed generalization study of one yes/no item, its two questions imported as
    valid, answered by one worker; carl holds a CHANGE share on it, sam none."""
    olga, _ = staff("olga")
    carl, carl_client = staff("carl")
    sam, sam_client = staff("sam")
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=olga, n_items=1, n_sources=1, n_genq=0, quota=1,
                       units_per_task=2, status=Study.Status.DRAFT)
    item = study.items.get()
    path = tmp_path / "generalisation_final_test.json"
    path.write_text(json.dumps({item.question: [["Is it so?", "True", "rephrase"],
                                                ["Is it not so?", "False", "counterfactual"]]}))
    generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=VALID, user=olga)
    study = study_open(study=study, user=OPERATOR)
    work(study, "5a9d64f5f6dfdd0001eaa73d")
    study_close(user=OPERATOR, study=study)
    study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)
    questions = list(GeneralizationQuestion.objects.filter(item=item).order_by("pk"))
    assert study.units.filter(generalization_question__in=questions).count() == 2
    return study, questions, (carl, carl_client), (sam, sam_client)


def _mark(client, action: str, questions) -> str:
    page = client.post(reverse(CHANGELIST), {"action": action, "_selected_action": [q.pk for q in questions]},
                       follow=True)
    return page.content.decode()


def test_marking_a_closed_studys_question_invalid_and_valid_again_records_each_change(closed_study):
    study, (question, other), (carl, client), _ = closed_study
    imported = question.metadata["validation"]
    assert (imported["status"], imported["set_by"]) == (VALID, "import") and imported["sha256"]

    invalid_page = _mark(client, "mark_invalid", [question])
    question.refresh_from_db()
    after_invalid = question.metadata["validation"]
    valid_page = _mark(client, "mark_valid", [question])
    question.refresh_from_db()

    assert "1 question(s) marked invalid" in invalid_page and "1 question(s) marked valid" in valid_page
    assert question.validation_status == VALID
    assert {k: after_invalid.get(k) for k in ("status", "previous", "set_by", "user_id", "username")} == {
        "status": INVALID, "previous": VALID, "set_by": "user", "user_id": carl.pk, "username": "carl"}
    record = question.metadata["validation"]
    assert {k: record.get(k) for k in ("status", "previous", "set_by", "user_id", "username")} == {
        "status": VALID, "previous": INVALID, "set_by": "user", "user_id": carl.pk, "username": "carl"}
    assert record["at"] >= after_invalid["at"] > imported["at"]
    # The round trip leaves its trace: the import's judgement, then carl's "invalid".
    assert record["history"] == [imported, {k: v for k, v in after_invalid.items() if k != "history"}]
    assert question.metadata["original_question"] == study.items.get().question  # the rest is kept
    # The admin's own history of the question says it too, one entry per change, by carl.
    entries = LogEntry.objects.filter(object_id=str(question.pk), content_type__model="generalizationquestion")
    assert [(e.user_id, e.action_flag, e.get_change_message()) for e in entries.order_by("pk")] == [
        (carl.pk, LOGGED_CHANGE, "Validation status changed from valid to invalid."),
        (carl.pk, LOGGED_CHANGE, "Validation status changed from invalid to valid."),
    ]
    other.refresh_from_db()
    assert other.metadata["validation"] == imported  # not selected: as imported


def test_a_question_already_in_the_status_is_not_recorded_again(closed_study):
    _, (question, _other), (_carl, client), _ = closed_study
    before = question.metadata

    page = _mark(client, "mark_valid", [question])

    question.refresh_from_db()
    assert "0 question(s) marked valid" in page and question.metadata == before
    assert not LogEntry.objects.filter(object_id=str(question.pk)).exists()


def test_the_history_keeps_the_last_changes_only(closed_study):
    _, (question, _other), (carl, _client), _ = closed_study

    for n in range(HISTORY_KEPT + 5):
        generalization_questions_set_validation(user=carl, questions=[question], status=INVALID if n % 2 == 0
                                                else VALID)

    question.refresh_from_db()
    record = question.metadata["validation"]
    assert (record["status"], record.get("previous")) == (INVALID, VALID)
    assert len(record["history"]) == HISTORY_KEPT
    assert all(entry["set_by"] == "user" for entry in record["history"])  # the import's record aged out
    assert all("history" not in entry for entry in record["history"])


def test_the_service_checks_the_change_share_itself_and_records_nothing_refused(closed_study):
    _, (question, _other), _, (sam, sam_client) = closed_study
    before = question.metadata

    page = _mark(sam_client, "mark_invalid", [question])
    with pytest.raises(ContentNotYours):
        generalization_questions_set_validation(user=sam, questions=[question], status=INVALID)

    question.refresh_from_db()
    assert "Nothing marked" in page
    assert (question.validation_status, question.metadata) == (VALID, before)


def test_the_operator_is_recorded_as_such(closed_study):
    _, (question, _other), _, _ = closed_study

    changed = generalization_questions_set_validation(questions=[question], status=INVALID)

    question.refresh_from_db()
    record = question.metadata["validation"]
    assert (record["set_by"], record["status"], record.get("previous")) == ("operator", INVALID, VALID)
    assert "user_id" not in record
    assert [q.pk for q in changed] == [question.pk]  # the questions changed, as saved


def test_the_change_form_does_not_set_the_validation_status(closed_study):
    """The status is the actions' to set (they record who did it); the form shows it read-only."""
    olga = closed_study[0].owner
    draft = make_study(kind=Study.Kind.GENERALIZATION, owner=olga, n_items=1, n_sources=1, n_genq=1,
                       status=Study.Status.DRAFT)
    question = GeneralizationQuestion.objects.get(item__in=draft.items.all())
    client = Client()
    client.force_login(olga)
    url = reverse("admin:studies_generalizationquestion_change", args=[question.pk])
    data = admin_form_data(client.get(url))

    response = client.post(url, {**data, "validation_status": INVALID, "text": "Edited wording?"})

    question.refresh_from_db()
    assert response.status_code == 302 and question.text == "Edited wording?"
    assert question.validation_status == GeneralizationQuestion.Validation.UNVALIDATED


def test_the_change_form_cannot_forge_the_validation_record(closed_study):
    """``metadata["validation"]`` is written only by whoever sets the status (the actions, the
    imports): an edit of a question's metadata through the form keeps the stored record, and a new
    question starts with none (``content._validation_record_kept``)."""
    olga = closed_study[0].owner
    draft = make_study(kind=Study.Kind.GENERALIZATION, owner=olga, n_items=1, n_sources=1, n_genq=1,
                       status=Study.Status.DRAFT)
    question = GeneralizationQuestion.objects.get(item__in=draft.items.all())
    generalization_questions_set_validation(user=olga, questions=[question], status=INVALID)
    question.refresh_from_db()
    recorded = question.metadata["validation"]
    forged = {"status": "valid", "set_by": "import", "file": "made-up.csv", "history": []}
    client = Client()
    client.force_login(olga)
    url = reverse("admin:studies_generalizationquestion_change", args=[question.pk])
    data = admin_form_data(client.get(url))

    response = client.post(url, {**data, "metadata": json.dumps({**question.metadata, "validation": forged})})

    question.refresh_from_db()
    assert response.status_code == 302
    assert question.metadata["validation"] == recorded
    added = client.post(reverse("admin:studies_generalizationquestion_add"), {
        **data, "text": "A new one?", "metadata": json.dumps({"validation": forged})})
    assert added.status_code == 302, added.content.decode()[-2000:]
    assert "validation" not in GeneralizationQuestion.objects.get(text="A new one?").metadata
