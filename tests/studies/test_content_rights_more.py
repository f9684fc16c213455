"""Two uses of shared content the rule of ``studies.services.content`` must count: a utility
study's Gen-U reads the predictions on the generalization questions of its items (so those
questions are used by it, though no worker sees them), and a study reads its dataset's name, task
format and choice labels. Researcher sam holds every model permission but no right on olga's
studies; everything is tried through the admin pages as a researcher would."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.models import UnitScore
from scoring.services import study_score
from studies.models import Dataset, GeneralizationQuestion, GenUPrediction, Study
from studies.services.content import ContentNotYours
from studies.services.questions import generalization_questions_set_validation
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.factories import DatasetFactory, GeneralizationQuestionFactory, RationaleSourceFactory, staff
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

INVALID = GeneralizationQuestion.Validation.INVALID
VALID = GeneralizationQuestion.Validation.VALID


@pytest.fixture
def olga():
    return staff("olga")


@pytest.fixture
def sam():
    return staff("sam")


def _change_url(obj) -> str:
    return reverse(f"admin:studies_{obj._meta.model_name}_change", args=[obj.pk])


def _delete_url(obj) -> str:
    return reverse(f"admin:studies_{obj._meta.model_name}_delete", args=[obj.pk])


def _changelist(model) -> str:
    return reverse(f"admin:studies_{model._meta.model_name}_changelist")


def _form_data(client: Client, obj) -> dict:
    """What the change page's form sends unchanged (read by someone who may change it), with the
    hidden initial values a browser sends for fields with a callable default."""
    page = client.get(_change_url(obj))
    assert page.status_code == 200
    return admin_form_data(page)


def _predict(question, source, answerer, correct):
    """A Gen-U prediction as the answering job stores it."""
    other = "no" if question.answer == "yes" else "yes"
    GenUPrediction.objects.create(
        generalization_question=question, rationale_source=source, answerer=answerer,
        answerer_model=f"t5-base-{answerer}", predicted_answer=question.answer if correct else other,
        correct=correct)


def _gen_u(study):
    run = study_score(study=study, similarity=False)
    return (sorted(UnitScore.objects.filter(study=study).values_list("item_id", "gen_u")),
            run.results["gen_u"]["n_questions"])


def _question_state(questions):
    return [(q.pk, q.text, q.answer, q.validation_status)
            for q in GeneralizationQuestion.objects.filter(pk__in=[q.pk for q in questions]).order_by("pk")]


# --- Gen-U questions ---------------------------------------------------------------------------


@pytest.fixture
def scored_closed_study(olga):
    """olga's closed utility study, worked and with Gen-U predictions of its source on two valid
    questions of its one item (F^I wrong, F^IR right: Gen-U +1)."""
    owner, _ = olga
    study = open_utility_study(name="olga-utility", owner=owner, n_items=1, n_sources=1, quota=1)
    work(study, "5a9d64f5f6dfdd0001eaa73d")
    study_close(user=OPERATOR, study=study)
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    item = study.items.get()
    source = study.sources.get()
    questions = [GeneralizationQuestionFactory(item=item, text=f"Generalization {k}?", answer="yes",
                                               validation_status=VALID) for k in range(2)]
    for q in questions:
        _predict(q, source, "I", False)
        _predict(q, source, "IR", True)
    return study, questions


def test_another_researcher_cannot_change_the_questions_a_closed_studys_gen_u_reads(olga, sam,
                                                                                  scored_closed_study):
    study, questions = scored_closed_study
    user, client = sam
    before, state = _gen_u(study), _question_state(questions)
    assert before[0][0][1] == 1 and before[1] == 2
    question = questions[0]

    marked = client.post(_changelist(GeneralizationQuestion),
                         {"action": "mark_invalid", "_selected_action": [q.pk for q in questions]}, follow=True)
    edit = client.post(_change_url(question), {**_form_data(olga[1], question),
                                               "text": "EDITED?", "answer": "no"})
    delete = client.post(_delete_url(question), {"post": "yes"})
    client.post(_changelist(GeneralizationQuestion),
                {"action": "delete_selected", "_selected_action": [q.pk for q in questions], "post": "yes"})

    page = marked.content.decode()
    assert "Nothing marked" in page and "a study you may not change" in page and study.name not in page
    assert edit.status_code == delete.status_code == 403
    assert _question_state(questions) == state
    assert GenUPrediction.objects.filter(generalization_question__in=questions).count() == 4
    with pytest.raises(ContentNotYours):
        generalization_questions_set_validation(user=user, questions=questions, status=INVALID)
    assert _gen_u(study) == before


def test_the_owner_still_validates_the_questions_but_cannot_change_what_gen_u_read(olga, scored_closed_study):
    study, questions = scored_closed_study
    _, client = olga
    question = questions[0]

    edit = client.post(_change_url(question), {**_form_data(client, question), "text": "EDITED?"})
    confirm = client.get(_delete_url(question)).content.decode()
    delete = client.post(_delete_url(question), {"post": "yes"})
    marked = client.post(_changelist(GeneralizationQuestion),
                         {"action": "mark_invalid", "_selected_action": [question.pk]}, follow=True)

    assert edit.status_code == 200 and "text of generalization question" in edit.content.decode()
    assert study.name in confirm and "cannot be deleted" in confirm and delete.status_code == 403
    assert "1 question(s) marked invalid" in marked.content.decode()
    question.refresh_from_db()
    assert (question.text, question.validation_status) == ("Generalization 0?", INVALID)


def test_questions_whose_predictions_no_study_of_olgas_reads_stay_editable_by_others(sam, olga):
    """Predictions of a source the study does not list, and questions without predictions, are
    read by no Gen-U of hers: the rule stays where it was for them."""
    owner, _ = olga
    _, client = sam
    study = make_study(owner=owner, kind=Study.Kind.UTILITY, n_items=1, n_sources=1, n_genq=2,
                       status=Study.Status.CLOSED)
    question, bare = GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("pk")
    _predict(question, RationaleSourceFactory(name="not-in-olgas-study"), "IR", True)

    marked = client.post(_changelist(GeneralizationQuestion),
                         {"action": "mark_invalid", "_selected_action": [question.pk, bare.pk]}, follow=True)
    edit = client.post(_change_url(bare), {**_form_data(client, bare), "text": "EDITED?"})

    assert "2 question(s) marked invalid" in marked.content.decode() and edit.status_code == 302
    bare.refresh_from_db()
    assert bare.text == "EDITED?"


# --- datasets ----------------------------------------------------------------------------------


def test_another_researcher_cannot_change_or_delete_an_open_studys_dataset(olga, sam):
    owner, olga_client = olga
    _, client = sam
    study = make_study(owner=owner, n_items=1, n_sources=1)
    dataset = study.dataset
    data = _form_data(olga_client, dataset)
    before = (dataset.name, dataset.task_format, list(dataset.choice_labels))

    edits = [client.post(_change_url(dataset), {**data, **change}) for change in (
        {"task_format": Dataset.TaskFormat.MULTIPLE_CHOICE, "choice_labels": '["a", "b"]'},
        {"name": "renamed-by-sam"},
        {"description": "sam's note"},
    )]
    delete = client.post(_delete_url(dataset), {"post": "yes"})
    client.post(_changelist(Dataset), {"action": "delete_selected", "_selected_action": [dataset.pk], "post": "yes"})

    assert [r.status_code for r in edits] == [403, 403, 403] and delete.status_code == 403
    dataset.refresh_from_db()
    assert (dataset.name, dataset.task_format, list(dataset.choice_labels)) == before
    assert dataset.description == ""


def test_the_owner_cannot_change_what_an_open_study_reads_of_its_dataset(olga):
    owner, client = olga
    study = make_study(owner=owner, n_items=1, n_sources=1)
    dataset = study.dataset
    data = _form_data(client, dataset)
    name = dataset.name

    fmt = client.post(_change_url(dataset), {**data, "task_format": Dataset.TaskFormat.MULTIPLE_CHOICE,
                                             "choice_labels": '["a", "b"]'})
    rename = client.post(_change_url(dataset), {**data, "name": "renamed"})
    note = client.post(_change_url(dataset), {**data, "description": "a note of hers"})

    assert fmt.status_code == rename.status_code == 200
    assert "choice_labels, task_format of dataset" in fmt.content.decode() and study.name in fmt.content.decode()
    assert "name of dataset" in rename.content.decode()
    assert note.status_code == 302
    dataset.refresh_from_db()
    assert (dataset.name, dataset.task_format, dataset.description) == (name, "yes_no", "a note of hers")


def test_a_dataset_no_study_uses_stays_editable_and_a_drafts_by_its_researchers(olga, sam):
    owner, olga_client = olga
    _, client = sam
    free = DatasetFactory(name="nobody-uses-it")
    draft = make_study(owner=owner, n_items=1, n_sources=1, status=Study.Status.DRAFT)

    edit = client.post(_change_url(free), {**_form_data(client, free), "name": "renamed-by-sam"})
    not_sams = client.post(_change_url(draft.dataset), {**_form_data(olga_client, draft.dataset), "name": "x"})
    hers = olga_client.post(_change_url(draft.dataset), {**_form_data(olga_client, draft.dataset),
                                                         "name": "renamed-by-olga"})
    delete = client.post(_delete_url(free), {"post": "yes"})

    assert (edit.status_code, not_sams.status_code, hers.status_code, delete.status_code) == (302, 403, 302, 302)
    assert not Dataset.objects.filter(pk=free.pk).exists()
    draft.dataset.refresh_from_db()
    assert draft.dataset.name == "renamed-by-olga"
