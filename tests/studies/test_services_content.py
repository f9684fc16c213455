"""A study's content is fixed once it opens, and only its researchers change what it uses (issue
20 item 5; ``studies.services.content``). Researcher bob, a staff user holding every model
permission but no right on alice's studies, tries each of the four content admins; alice herself
tries to change what her open study shows; a worker's reveal page and the study's scores are
read before and after."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from scoring.models import UnitScore
from scoring.services import study_score
from studies.models import GeneralizationQuestion, Item, Rationale, RationaleSource, Study
from studies.services.content import ContentNotYours
from studies.services.importers import (
    ImportValidationError,
    generalization_questions_import,
    rationales_import,
)
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import make_study
from tests.annotations.pages import answer, entry_url, start
from tests.studies.helpers import write_jsonl
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

APPS = ("studies", "annotations", "scoring")


def _researcher(username: str):
    user = get_user_model().objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=APPS))
    return get_user_model().objects.get(pk=user.pk)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice():
    return _researcher("alice")


@pytest.fixture
def bob():
    return _researcher("bob")


def _change_url(obj) -> str:
    return reverse(f"admin:studies_{obj._meta.model_name}_change", args=[obj.pk])


def _form_data(client: Client, obj) -> dict:
    """What the change page's form would send unchanged (read as its researcher sees it)."""
    page = client.get(_change_url(obj))
    assert page.status_code == 200
    data = {}
    for field in page.context["adminform"].form:
        value = field.value()
        data[field.html_name] = "" if value is None else value
    return data


def _content_of(study: Study, model):
    item = study.items.order_by("pk").first()
    source = study.sources.order_by("pk").first()
    return {
        Item: item,
        RationaleSource: source,
        Rationale: Rationale.objects.get(item=item, source=source),
        GeneralizationQuestion: GeneralizationQuestion.objects.filter(item=item).order_by("pk").first(),
    }[model]


# The field a worker sees on each model, and an edit of it.
EDITS = [
    (Item, "question", "EDITED: is this another question?"),
    (RationaleSource, "name", "edited-source-name"),
    (Rationale, "text", "EDITED: a rationale planted by another researcher."),
    (GeneralizationQuestion, "text", "EDITED: a generalization question planted by another researcher?"),
]


@pytest.mark.parametrize("status", [Study.Status.OPEN, Study.Status.DRAFT])
@pytest.mark.parametrize(("model", "field", "new"), EDITS, ids=[m.__name__ for m, _, _ in EDITS])
def test_a_researcher_without_rights_on_a_study_cannot_edit_its_content_in_the_admin(alice, bob, model, field,
                                                                                    new, status):
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=alice, status=status)
    obj = _content_of(study, model)
    before = getattr(obj, field)
    data = {**_form_data(_client(alice), obj), field: new}

    response = _client(bob).post(_change_url(obj), data)

    assert response.status_code == 403
    obj.refresh_from_db()
    assert getattr(obj, field) == before


@pytest.mark.parametrize(("model", "field", "new"), EDITS, ids=[m.__name__ for m, _, _ in EDITS])
def test_a_researcher_without_rights_on_a_study_cannot_delete_its_content_in_the_admin(alice, bob, model, field,
                                                                                      new):
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=alice, status=Study.Status.DRAFT)
    obj = _content_of(study, model)
    url = reverse(f"admin:studies_{model._meta.model_name}_delete", args=[obj.pk])

    assert _client(bob).post(url, {"post": "yes"}).status_code == 403
    changelist = reverse(f"admin:studies_{model._meta.model_name}_changelist")
    _client(bob).post(changelist, {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"})

    assert model.objects.filter(pk=obj.pk).exists()


def test_a_researcher_without_rights_cannot_mark_the_studys_questions_invalid(alice, bob):
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=alice)
    question = _content_of(study, GeneralizationQuestion)

    response = _client(bob).post(reverse("admin:studies_generalizationquestion_changelist"),
                                 {"action": "mark_invalid", "_selected_action": [question.pk]}, follow=True)

    page = response.content.decode()
    assert "Nothing marked" in page and "a study you may not change" in page and study.name not in page
    question.refresh_from_db()
    assert question.validation_status == GeneralizationQuestion.Validation.UNVALIDATED
    with pytest.raises(ContentNotYours):
        generalization_questions_set_validation(user=bob, questions=[question], status="invalid")


def test_the_owners_edit_after_opening_leaves_the_reveal_page_as_it_was(alice):
    study = make_study(owner=alice, n_items=1, n_sources=1, units_per_task=1,
                       rationale_text="ORIGINAL-RATIONALE {item}", question_text="ORIGINAL-QUESTION {i}")
    worker = Client()
    task = start(worker, entry_url(study))
    answer(worker, task, "no")
    rationale = _content_of(study, Rationale)
    item = _content_of(study, Item)
    owner = _client(alice)

    edit_rationale = owner.post(_change_url(rationale), {**_form_data(owner, rationale), "text": "EDITED-RATIONALE"})
    edit_question = owner.post(_change_url(item), {**_form_data(owner, item), "question": "EDITED-QUESTION"})

    reveal = worker.get(task).content.decode()
    assert 'name="step" value="after"' in reveal
    assert "ORIGINAL-RATIONALE 0" in reveal and "ORIGINAL-QUESTION 0" in reveal
    assert "EDITED" not in reveal
    assert edit_rationale.status_code == edit_question.status_code == 200
    page = edit_rationale.content.decode()
    assert "text of rationale" in page and study.name in page and "cannot change" in page
    assert "question of item" in edit_question.content.decode()
    rationale.refresh_from_db()
    item.refresh_from_db()
    assert (rationale.text, item.question) == ("ORIGINAL-RATIONALE 0", "ORIGINAL-QUESTION 0")


def test_the_owners_edit_after_opening_leaves_the_scores_as_they_were(alice):
    study = open_utility_study(name="fixed-gold", owner=alice, n_items=2, n_sources=1, quota=1, gold="yes")
    work(study, "5a9d64f5f6dfdd0001eaa73d")
    study_score(study=study, similarity=False)
    scores = list(UnitScore.objects.filter(study=study).order_by("pk").values_list(
        "item_id", "after_correct", "before_correct", "utility"))
    item = _content_of(study, Item)
    owner = _client(alice)

    response = owner.post(_change_url(item), {**_form_data(owner, item), "gold_answer": "no"})
    study_score(study=study, similarity=False)

    assert list(UnitScore.objects.filter(study=study).order_by("pk").values_list(
        "item_id", "after_correct", "before_correct", "utility")) == scores
    assert response.status_code == 200 and "gold_answer of item" in response.content.decode()


def test_the_owner_cannot_delete_what_an_open_study_shows(alice):
    study = make_study(owner=alice, n_items=1, n_sources=1)
    source = _content_of(study, RationaleSource)
    owner = _client(alice)
    url = reverse("admin:studies_rationalesource_delete", args=[source.pk])

    confirm = owner.get(url).content.decode()
    response = owner.post(url, {"post": "yes"})

    assert study.name in confirm and "cannot be deleted" in confirm
    assert response.status_code == 403
    assert RationaleSource.objects.filter(pk=source.pk).exists() and study.units.exists()


def test_the_owner_still_edits_a_draft_and_what_workers_do_not_see(alice):
    draft = make_study(owner=alice, n_items=1, n_sources=1, status=Study.Status.DRAFT)
    rationale = _content_of(draft, Rationale)
    opened = make_study(owner=alice, n_items=1, n_sources=1)
    source = _content_of(opened, RationaleSource)
    owner = _client(alice)

    edited = owner.post(_change_url(rationale), {**_form_data(owner, rationale), "text": "Better wording."})
    described = owner.post(_change_url(source), {**_form_data(owner, source), "description": "Where it came from."})

    assert edited.status_code == 302 and described.status_code == 302
    rationale.refresh_from_db()
    source.refresh_from_db()
    assert (rationale.text, source.description) == ("Better wording.", "Where it came from.")


def test_a_reimport_that_changes_an_open_studys_rationale_is_refused_by_line(alice, bob, tmp_path):
    study = make_study(owner=alice, n_items=1, n_sources=1, rationale_text="ORIGINAL-RATIONALE {item}")
    rationale = _content_of(study, Rationale)
    path = write_jsonl(tmp_path / "rationales.jsonl", [
        {"item_id": rationale.item.external_id, "source": rationale.source.name, "rationale": "EDITED-RATIONALE"},
    ])

    for user in (alice, bob, None):
        with pytest.raises(ImportValidationError) as refused:
            rationales_import(file=path, dataset_name=study.dataset.name, user=user)
        (error,) = refused.value.errors
        # Another's row: its line and key field, never which of its fields differ (see test_import_oracles).
        assert error.line == 1 and (error.field == "source" if user is bob else "text" in error.field)
        # The study is named to its own researchers only.
        assert ("may not change" in error.reason) == (study.name not in error.reason) == (user is bob)
    rationale.refresh_from_db()
    assert rationale.text == "ORIGINAL-RATIONALE 0"


def test_a_researcher_without_rights_cannot_add_a_question_to_anothers_draft(alice, bob):
    draft = make_study(kind=Study.Kind.GENERALIZATION, owner=alice, status=Study.Status.DRAFT, n_items=1)
    item = _content_of(draft, Item)
    url = reverse("admin:studies_generalizationquestion_add")
    planted = {"item": item.pk, "qtype": "rephrase", "text": "PLANTED: a question for alice's workers?",
               "answer": "yes", "origin": "", "validation_status": "unvalidated", "metadata": "{}"}

    response = _client(bob).post(url, planted, follow=True)

    assert not GeneralizationQuestion.objects.filter(text__startswith="PLANTED").exists()
    page = response.content.decode()
    assert "a study you may not change" in page and draft.name not in page  # another's study stays unnamed
    assert _client(alice).post(url, planted).status_code == 302  # the study's own researcher may
    assert GeneralizationQuestion.objects.filter(text__startswith="PLANTED").exists()


def test_a_researcher_without_rights_cannot_import_questions_into_anothers_draft(alice, bob, tmp_path):
    draft = make_study(kind=Study.Kind.GENERALIZATION, owner=alice, status=Study.Status.DRAFT, n_items=1)
    item = _content_of(draft, Item)
    path = tmp_path / "generalisation_final_test.json"
    path.write_text(json.dumps({item.question: [["PLANTED: imported for alice's workers?", "True", "rephrase"]]}))

    with pytest.raises(ImportValidationError) as refused:
        generalization_questions_import(file=path, dataset_name=draft.dataset.name, user=bob)

    (error,) = refused.value.errors
    assert error.line is not None and "a study you may not change" in error.reason and draft.name not in error.reason
    assert not GeneralizationQuestion.objects.filter(text__startswith="PLANTED").exists()
    generalization_questions_import(file=path, dataset_name=draft.dataset.name, user=alice)
    assert GeneralizationQuestion.objects.filter(text__startswith="PLANTED").exists()
