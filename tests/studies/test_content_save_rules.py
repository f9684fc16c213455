"""A content row saved one by one (``studies.services.content.content_row_save``: the admin's add
and change forms) follows the rules every import follows, which the importers own
(``importers.values.identifier_problem``, ``sentinel_problem``; ``importers.items.check_choices``):
no bidirectional control in a dataset's or a source's name or an item's id, no T5 sentinel in an
item's question, options or gold rationale or a rationale's text, no two options of an item alike.
Each refusal names its field; nothing is written."""
from __future__ import annotations

import json

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


def test_the_admin_add_pages_refuse_what_an_import_refuses(admin_client, mc_dataset):
    _, client = admin_client
    response = client.post(reverse("admin:studies_dataset_add"),
                           {"name": f"ds{RLO}evil", "task_format": "yes_no", "choice_labels": "[]",
                            "description": ""}, follow=True)
    assert not Dataset.objects.filter(name__startswith="ds").exists()
    assert "name: the dataset name 'ds\\\\u202eevil' holds the bidirectional control" in _messages(response)

    response = client.post(reverse("admin:studies_item_add"), _item_form(
        mc_dataset, external_id=f"q{RLO}1", question="Which <extra_id_0>?",
        choices=json.dumps([{"label": "a", "text": "magnet"}, {"label": "b", "text": "Magnet"}])), follow=True)
    assert not Item.objects.exists()
    shown = _messages(response)
    assert "external_id: the id 'q\\\\u202e1' holds the bidirectional control" in shown
    assert "question: the question holds '<extra_id_0>', a T5 sentinel token" in shown
    assert "choices[1]: the option 'Magnet' is also choices[0]" in shown

    response = client.post(reverse("admin:studies_rationalesource_add"),
                           {"name": f"src{RLO}", "kind": "imported", "description": "", "backend": "",
                            "model_name_or_path": "", "endpoint_url": "", "template": "", "decoding": "{}",
                            "demonstrations": "[]", "seed": "0", "generation_info": "{}"}, follow=True)
    assert not RationaleSource.objects.filter(name__startswith="src").exists()
    assert "name: the source name 'src\\\\u202e' holds the bidirectional control" in _messages(response)

    # What an import accepts, the admin adds; an option label written "B" is stored as its letter.
    response = client.post(reverse("admin:studies_item_add"), _item_form(
        mc_dataset, choices=json.dumps([{"label": "A", "text": "iron"}, {"label": "(b)", "text": "wood"}])))
    assert response.status_code == 302
    assert Item.objects.get(external_id="q1").choices == [{"label": "a", "text": "iron"}, {"label": "b", "text": "wood"}]


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
