"""A content row saved one by one (``studies.services.content.content_row_save``: the admin's add
and change forms) follows the rules every import follows, whose one owner is ``studies.textrules``:
no bidirectional control in a dataset's or a source's name or an item's id, no T5 sentinel in an
item's question, options or gold rationale or a rationale's text, no two options of an item alike.
Each refusal names its field; nothing is written."""
from __future__ import annotations

import html
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from studies.models import Dataset, GeneralizationQuestion, Item, Rationale, RationaleSource
from studies.services.content import ContentChangeRefused, content_row_save

pytestmark = pytest.mark.django_db

RLO = "\u202e"


@pytest.fixture
def admin_client():
    user = get_user_model().objects.create_superuser(username="root", password="pw", email="root@example.org")
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def mc_dataset(admin_client):
    user, _ = admin_client
    return content_row_save(user=user, obj=Dataset(name="obqa", task_format=Dataset.TaskFormat.MULTIPLE_CHOICE,
                                                   choice_labels=["a", "b"]), changed=())


def _messages(response) -> str:
    return " ".join(str(m) for m in response.context["messages"]) if response.context else ""


def _item_form(dataset, **values):
    form = {"dataset": dataset.pk, "external_id": "q1", "question": "Which metal does a magnet pull?",
            "choices": json.dumps([{"label": "a", "text": "iron"}, {"label": "b", "text": "wood"}]),
            "gold_answer": "a", "gold_rationale": "", "split": "test", "metadata": "{}"}
    form.update(values)
    return form


def _initials(client, url) -> dict[str, str]:
    """The hidden ``initial-*`` inputs of the form at ``url``, which a browser posts with it."""
    page = client.get(url).content.decode()
    assert 'name="initial-' in page
    return {name: html.unescape(value) for name, value in re.findall(
        r'<input type="hidden" name="(initial-[\w-]+)" value="([^"]*)"', page)}


def _refused(client, url, data) -> dict[str, list[str]]:
    """Post the admin form at ``url`` as a browser does: refused, the page comes back (200) with
    what was typed, each reason beside its field. Answers the form's errors by field."""
    response = client.post(url, {**_initials(client, url), **data})
    assert response.status_code == 200
    form = response.context["adminform"].form
    page = response.content.decode()
    for field, value in data.items():
        if field in form.errors and isinstance(value, str) and value:
            assert html.escape(value) in page  # what was typed, not what is stored
    return {field: list(errors) for field, errors in form.errors.items()}


def test_the_admin_add_pages_refuse_what_an_import_refuses(admin_client, mc_dataset):
    _, client = admin_client
    errors = _refused(client, reverse("admin:studies_dataset_add"),
                      {"name": f"ds{RLO}evil", "task_format": "yes_no", "choice_labels": "[]", "description": ""})
    assert not Dataset.objects.filter(name__startswith="ds").exists()
    assert "the dataset name 'ds\\\\u202eevil' holds the bidirectional control" in errors["name"][0]

    errors = _refused(client, reverse("admin:studies_item_add"), _item_form(
        mc_dataset, external_id=f"q{RLO}1", question="Which <extra_id_0>?",
        choices=json.dumps([{"label": "a", "text": "magnet"}, {"label": "b", "text": "Magnet"}])))
    assert not Item.objects.exists()
    assert "the id 'q\\\\u202e1' holds the bidirectional control" in errors["external_id"][0]
    assert "the question holds '<extra_id_0>', a T5 sentinel token" in errors["question"][0]
    assert "choices[1]: the option 'Magnet' is also choices[0]" in errors["choices"][0]

    errors = _refused(client, reverse("admin:studies_rationalesource_add"),
                      {"name": f"src{RLO}", "kind": "imported", "description": "", "backend": "",
                       "model_name_or_path": "", "endpoint_url": "", "template": "", "decoding": "{}",
                       "demonstrations": "[]", "seed": "0", "generation_info": "{}"})
    assert not RationaleSource.objects.filter(name__startswith="src").exists()
    assert "the source name 'src\\\\u202e' holds the bidirectional control" in errors["name"][0]

    # What an import accepts, the admin adds; an option label written "B" is stored as its letter.
    url = reverse("admin:studies_item_add")
    response = client.post(url, {**_initials(client, url), **_item_form(
        mc_dataset, choices=json.dumps([{"label": "A", "text": "iron"}, {"label": "(b)", "text": "wood"}]))})
    assert response.status_code == 302
    assert Item.objects.get(external_id="q1").choices == [{"label": "a", "text": "iron"}, {"label": "b", "text": "wood"}]


def test_the_admin_change_page_keeps_what_was_typed_beside_the_refusal(admin_client, mc_dataset):
    """An edit the import rules refuse comes back with the typed values and the reason beside its
    field, not a redirect to the stored row; the fields the edit did not change are not asked."""
    user, client = admin_client
    item = content_row_save(user=user, obj=Item(**{**_item_form(mc_dataset), "dataset": mc_dataset,
                                                   "choices": [{"label": "a", "text": "iron"},
                                                               {"label": "b", "text": "wood"}], "metadata": {}}),
                            changed=())
    url = reverse("admin:studies_item_change", args=[item.pk])
    typed = _item_form(mc_dataset, question="Which metal, <extra_id_0>?", gold_rationale="Iron <extra_id_1>.",
                       choices=json.dumps([{"label": "a", "text": "iron"}, {"label": "b", "text": "wood"}]))
    errors = _refused(client, url, typed)
    assert set(errors) == {"question", "gold_rationale"}
    assert "the question holds '<extra_id_0>'" in errors["question"][0]
    assert "the rationale holds '<extra_id_1>'" in errors["gold_rationale"][0]
    item.refresh_from_db()
    assert item.question == "Which metal does a magnet pull?" and item.gold_rationale == ""

    response = client.post(url, {**_initials(client, url), **_item_form(mc_dataset, question="Which metal?")})
    assert response.status_code == 302
    item.refresh_from_db()
    assert item.question == "Which metal?"


def test_content_row_save_checks_new_rows_and_the_fields_an_edit_changes(admin_client, mc_dataset):
    user, _ = admin_client
    item = content_row_save(user=user, obj=Item(**{**_item_form(mc_dataset), "dataset": mc_dataset,
                                                   "choices": [{"label": "a", "text": "iron"},
                                                               {"label": "b", "text": "wood"}], "metadata": {}}),
                            changed=())
    source = content_row_save(user=user, obj=RationaleSource(name="human", kind=RationaleSource.Kind.IMPORTED),
                              changed=())

    item.gold_rationale = "It is <extra_id_1>."
    with pytest.raises(ContentChangeRefused, match="gold_rationale: the rationale holds '<extra_id_1>'"):
        content_row_save(user=user, obj=item, changed=["gold_rationale"])
    item.refresh_from_db()
    item.choices = [{"label": "a", "text": "iron <extra_id_0>"}, {"label": "a", "text": "wood"}]
    with pytest.raises(ContentChangeRefused) as refused:
        content_row_save(user=user, obj=item, changed=["choices"])
    assert "choices[0]: the option holds '<extra_id_0>'" in str(refused.value)
    assert "choices[1].label: the label 'a' is also the label of choices[0]" in str(refused.value)
    item.refresh_from_db()
    assert item.choices == [{"label": "a", "text": "iron"}, {"label": "b", "text": "wood"}]

    with pytest.raises(ContentChangeRefused, match="text: the rationale holds '<extra_id_0>'"):
        content_row_save(user=user, obj=Rationale(item=item, source=source, text="So <extra_id_0>.",
                                                  predicted_answer="a"), changed=())
    assert not Rationale.objects.exists()
    with pytest.raises(ContentChangeRefused, match="text: the question holds '<extra_id_0>'"):
        content_row_save(user=user, obj=GeneralizationQuestion(item=item, qtype=GeneralizationQuestion.Type.REPHRASE,
                                                               text="Is <extra_id_0> so?", answer="yes"), changed=())
    assert not GeneralizationQuestion.objects.exists()
    source.name = f"human{RLO}"
    with pytest.raises(ContentChangeRefused, match="name: the source name"):
        content_row_save(user=user, obj=source, changed=["name"])
    dataset = Dataset.objects.get(pk=mc_dataset.pk)
    dataset.name = f"obqa{RLO}"
    with pytest.raises(ContentChangeRefused, match="name: the dataset name"):
        content_row_save(user=user, obj=dataset, changed=["name"])
    assert Dataset.objects.get(pk=mc_dataset.pk).name == "obqa"

    # An edit of another field does not ask what it did not change.
    item.metadata = {"note": "checked"}
    content_row_save(user=user, obj=item, changed=["metadata"])
