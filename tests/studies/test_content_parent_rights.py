"""A new content row, or an edit that moves one, hangs only from a dataset, item or rationale source
the acting user may read (``studies.services.content.content_row_save``; the visibility selectors):
another researcher's is answered as a missing one. The admin's add pages choose parents among those
the user may read, with the autocomplete widget (whose search is the parent's scoped admin), so
neither the page nor its search shows another researcher's question or source name."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from studies.models import Dataset, GeneralizationQuestion, Item, Rationale, RationaleSource
from studies.services.content import ContentChangeRefused, content_row_save
from studies.services.importers import items_import_table, rationales_import
from studies.services.studies import study_create
from tests.admin_forms import admin_form_data
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

QUESTION = "ALICE-SECRET-QUESTION about owls?"
SOURCE = "alice-secret-source"


def _dataset(tmp_path, name: str, prefix: str, question: str, *, user) -> Dataset:
    items_import_table(file=write_jsonl(tmp_path / f"{name}_test.jsonl", [
        {"id": f"{prefix}{i}", "question": f"{question} {i}", "answer": "yes"} for i in range(2)]),
        dataset_name=name, task_format="yes_no", user=user)
    return Dataset.objects.get(name=name)


def _source(tmp_path, dataset: Dataset, name: str, item_id: str, *, user) -> RationaleSource:
    rationales_import(file=write_jsonl(tmp_path / f"{name}.jsonl", [
        {"item_id": item_id, "source": name, "rationale": f"{name}'s rationale."}]), dataset_name=dataset.name,
        user=user)
    return RationaleSource.objects.get(name=name)


@pytest.fixture
def lab(tmp_path):
    """Alice (every permission) with her draft study on "alice-ds" and her source; Bob (who reads
    only what his studies use) with his on "bob-ds" and his source."""
    alice, _ = staff_client("alice")
    bob, bob_client = researcher_without_reference_views("bob")
    alice_ds = _dataset(tmp_path, "alice-ds", "a", QUESTION, user=alice)
    alice_src = _source(tmp_path, alice_ds, SOURCE, "a0", user=alice)
    study_create(name="alices-study", dataset=alice_ds, sources=[alice_src], owner=alice, user=alice)
    bob_ds = _dataset(tmp_path, "bob-ds", "b", "Bob's question", user=None)
    bob_src = _source(tmp_path, bob_ds, "bob-src", "b0", user=None)
    study_create(name="bobs-study", dataset=bob_ds, sources=[bob_src], owner=bob)
    return {
        "bob": bob, "client": bob_client, "alice_ds": alice_ds, "alice_item": Item.objects.get(external_id="a0"),
        "alice_src": alice_src, "bob_ds": bob_ds, "bob_item": Item.objects.get(external_id="b1"), "bob_src": bob_src,
    }


def _add_url(model) -> str:
    return reverse(f"admin:studies_{model._meta.model_name}_add")


def _form_data(client: Client, model, **values) -> dict:
    """What the add page's form sends, with ``values`` set."""
    page = client.get(_add_url(model))
    assert page.status_code == 200
    data = admin_form_data(page)
    data.update(values)
    return data


def _shown(response) -> str:
    return response.content.decode()


def test_the_add_page_shows_nothing_of_a_hidden_item_or_source_named_in_its_url(lab):
    client = lab["client"]
    for model in (Rationale, GeneralizationQuestion):
        page = client.get(_add_url(model), {"item": lab["alice_item"].pk, "source": lab["alice_src"].pk})
        assert page.status_code == 200
        assert "ALICE-SECRET-QUESTION" not in _shown(page) and SOURCE not in _shown(page)
    page = client.get(_add_url(Item), {"dataset": lab["alice_ds"].pk})
    assert "alice-ds" not in _shown(page)
    # His own are shown as before.
    page = client.get(_add_url(Rationale), {"item": lab["bob_item"].pk, "source": lab["bob_src"].pk})
    assert "Bob&#x27;s question 1" in _shown(page) and "bob-src" in _shown(page)


def test_the_autocomplete_search_offers_only_parents_the_user_may_read(lab):
    client = lab["client"]
    for model, field, term in [(Rationale, "item", "question"), (Rationale, "source", "src"),
                               (GeneralizationQuestion, "item", "question"), (Item, "dataset", "ds")]:
        found = client.get(reverse("admin:autocomplete"), {
            "app_label": "studies", "model_name": model._meta.model_name, "field_name": field, "term": term}).json()
        labels = " ".join(r["text"] for r in found["results"])
        assert labels and "ALICE" not in labels and SOURCE not in labels and "alice-ds" not in labels


def test_adding_a_row_to_a_hidden_parent_on_the_admin_page_is_refused(lab):
    client = lab["client"]
    rationales, items = Rationale.objects.count(), Item.objects.count()
    posted = client.post(_add_url(Rationale), _form_data(
        client, Rationale, item=lab["alice_item"].pk, source=lab["alice_src"].pk, text="Planted."))
    assert posted.status_code == 200 and set(posted.context["adminform"].form.errors) == {"item", "source"}
    posted = client.post(_add_url(Rationale), _form_data(
        client, Rationale, item=lab["bob_item"].pk, source=lab["alice_src"].pk, text="Planted."))
    assert posted.status_code == 200 and set(posted.context["adminform"].form.errors) == {"source"}
    posted = client.post(_add_url(Item), _form_data(
        client, Item, dataset=lab["alice_ds"].pk, external_id="x9", question="Planted?", gold_answer="yes",
        split="test"))
    assert posted.status_code == 200 and "dataset" in posted.context["adminform"].form.errors
    assert "ALICE-SECRET-QUESTION" not in _shown(posted) and "alice-ds" not in _shown(posted)
    assert (Rationale.objects.count(), Item.objects.count()) == (rationales, items)
    # His own parents are his to add to.
    posted = client.post(_add_url(Rationale), _form_data(
        client, Rationale, item=lab["bob_item"].pk, source=lab["bob_src"].pk, text="Mine."))
    assert posted.status_code == 302
    assert Rationale.objects.get(item=lab["bob_item"], source=lab["bob_src"]).text == "Mine."


def test_the_service_refuses_a_hidden_parent_as_a_missing_one(lab):
    bob = lab["bob"]
    missing = Item.objects.order_by("-pk").first().pk + 1000

    def refused(obj, changed=()) -> str:
        with pytest.raises(ContentChangeRefused) as exc:
            content_row_save(user=bob, obj=obj, changed=changed)
        return str(exc.value)

    hidden = refused(Rationale(item_id=lab["alice_item"].pk, source=lab["bob_src"], text="Planted."))
    assert hidden == refused(Rationale(item_id=missing, source=lab["bob_src"], text="Planted."))
    assert hidden == "item: there is no such item you may use"
    assert "source: there is no such rationale source you may use" in refused(
        Rationale(item=lab["bob_item"], source=lab["alice_src"], text="Planted."))
    assert refused(Item(dataset=lab["alice_ds"], external_id="x9", question="Planted?", gold_answer="yes",
                        split="test")) == "dataset: there is no such dataset you may use"
    assert refused(GeneralizationQuestion(item=lab["alice_item"], qtype="rephrase", text="Planted?",
                                          answer="yes")).startswith("item:")
    # An edit that moves his row to her item is refused too; one that leaves the parent is not.
    mine = Rationale.objects.get(item__external_id="b0", source=lab["bob_src"])
    mine.item = lab["alice_item"]
    assert refused(mine, ["item", "text"]) == hidden
    mine.refresh_from_db()
    mine.text = "Reworded."
    content_row_save(user=bob, obj=mine, changed=["text"])
    assert not Rationale.objects.filter(item=lab["alice_item"], source=lab["bob_src"]).exists()
    # The operator may name any parent.
    content_row_save(user=None, obj=Rationale(item=lab["alice_item"], source=lab["bob_src"], text="Ops."),
                     changed=())
    assert Rationale.objects.filter(item=lab["alice_item"], source=lab["bob_src"]).exists()
