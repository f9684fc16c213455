"""A new content row, or an edit that moves one, hangs only from a dataset, item or rationale source
the acting user may build on (``studies.services.content.content_row_save``; ``PARENT_SELECTORS``,
the rule imports write by): another researcher's, or one read only through a view share, is answered
as a missing one. The admin's add pages choose parents among those, with the autocomplete widget
(whose search is the parent's scoped admin, narrowed to them), so neither the page nor its search
shows another researcher's question or source name."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from studies.models import Dataset, GeneralizationQuestion, Item, Rationale, RationaleSource
from studies.models.core import YES_NO_CHOICES
from studies.services.content import ContentChangeRefused, content_row_save
from studies.services.importers import items_import_table, rationales_import
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import RESEARCHER, olgas_lab, researcher, write_jsonl

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


# --- A parent read only through a view share is not one to build on ---------------------------------
# A view share reads the owner's study; a row hung from its dataset or source is the owner's next
# study's to draw or show (``content.PARENT_SELECTORS``: the rule imports write by).

# Adding rows, and opening the parents' admins (their autocomplete search) without reading every row.
ADDS = ("studies.add_item", "studies.add_rationale", "studies.add_generalizationquestion", "studies.change_dataset",
        "studies.change_item", "studies.change_rationalesource")


@pytest.fixture
def shared_lab():
    """Olga's lab (``olgas_lab``) shared with Bob to view and with Carol to change; Bob has a study
    of his own (his dataset, item and source)."""
    lab = olgas_lab()
    lab.bob = researcher("bob", *RESEARCHER, *ADDS)
    lab.carol = researcher("carol", *RESEARCHER, *ADDS)
    study_share(study=lab.study, user=lab.olga, with_user=lab.bob, level="view")
    study_share(study=lab.study, user=lab.olga, with_user=lab.carol, level="change")
    lab.bobs_study = make_study(n_items=1, n_sources=1, status="draft", owner=lab.bob, name="bobs-study")
    return lab


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _item_data(client: Client, dataset: Dataset, external_id: str) -> dict:
    return _form_data(client, Item, dataset=dataset.pk, external_id=external_id, question="Planted by bob?",
                      choices=json.dumps(YES_NO_CHOICES), gold_answer="no", split="train", metadata="{}")


def test_a_view_share_reader_adds_no_item_to_the_owners_dataset(shared_lab):
    client = _logged_in(shared_lab.bob)
    posted = client.post(_add_url(Item), _item_data(client, shared_lab.dataset, "planted-1"))
    assert posted.status_code == 200
    assert "Select a valid choice" in str(posted.context["adminform"].form.errors["dataset"])
    assert not Item.objects.filter(dataset=shared_lab.dataset, external_id="planted-1").exists()
    with pytest.raises(ContentChangeRefused, match="^dataset: there is no such dataset you may use$"):
        content_row_save(user=shared_lab.bob, obj=Item(dataset=shared_lab.dataset, external_id="planted-2",
                                                       question="Planted?", choices=YES_NO_CHOICES, gold_answer="no", split="train"),
                         changed=())
    assert not Item.objects.filter(dataset=shared_lab.dataset, external_id__startswith="planted").exists()


def test_a_view_share_reader_adds_no_rationale_under_the_owners_source_nor_question_on_her_item(shared_lab):
    bob, own_item = shared_lab.bob, shared_lab.bobs_study.items.get()
    client = _logged_in(bob)
    posted = client.post(_add_url(Rationale), _form_data(
        client, Rationale, item=own_item.pk, source=shared_lab.source.pk, text="Planted by bob."))
    assert posted.status_code == 200 and set(posted.context["adminform"].form.errors) == {"source"}
    assert not Rationale.objects.filter(source=shared_lab.source, item=own_item).exists()
    with pytest.raises(ContentChangeRefused, match="^source: there is no such rationale source you may use$"):
        content_row_save(user=bob, obj=Rationale(item=own_item, source=shared_lab.source, text="Planted."),
                         changed=())
    shown = shared_lab.study.items.first()  # an item he reads through the share
    with pytest.raises(ContentChangeRefused, match="^item: there is no such item you may use$"):
        content_row_save(user=bob, obj=GeneralizationQuestion(item=shown, qtype="rephrase", text="Planted?",
                                                              answer="yes"), changed=())
    assert not Rationale.objects.filter(source=shared_lab.source, item=own_item).exists()
    assert not GeneralizationQuestion.objects.filter(item=shown, text="Planted?").exists()


def test_the_form_and_its_search_offer_a_view_share_reader_only_his_own_parents(shared_lab):
    client = _logged_in(shared_lab.bob)
    page = client.get(_add_url(Rationale))
    fields = page.context["adminform"].form.fields
    assert shared_lab.source not in fields["source"].queryset and shared_lab.train not in fields["item"].queryset
    assert shared_lab.bobs_study.sources.get() in fields["source"].queryset
    assert shared_lab.dataset not in client.get(_add_url(Item)).context["adminform"].form.fields["dataset"].queryset
    for model, field, parent in [(Item, "dataset", shared_lab.dataset), (Rationale, "source", shared_lab.source)]:
        found = client.get(reverse("admin:autocomplete"), {
            "app_label": "studies", "model_name": model._meta.model_name, "field_name": field, "term": ""}).json()
        assert str(parent.pk) not in {r["id"] for r in found["results"]}
        assert found["results"]  # his own are offered
    # His list of datasets still reads hers (reads keep the read selectors).
    assert shared_lab.dataset.name in client.get(reverse("admin:studies_dataset_changelist")).content.decode()


def test_the_owner_and_a_change_share_holder_still_add(shared_lab):
    client = _logged_in(shared_lab.carol)
    posted = client.post(_add_url(Item), _item_data(client, shared_lab.dataset, "carols-1"))
    assert posted.status_code == 302, posted.context["adminform"].form.errors
    assert Item.objects.filter(dataset=shared_lab.dataset, external_id="carols-1").exists()
    posted = client.post(_add_url(Rationale), _form_data(
        client, Rationale, item=Item.objects.get(external_id="carols-1").pk, source=shared_lab.source.pk,
        text="Carol's rationale."))
    assert posted.status_code == 302
    assert Rationale.objects.filter(source=shared_lab.source, item__external_id="carols-1").exists()
    found = client.get(reverse("admin:autocomplete"), {
        "app_label": "studies", "model_name": "item", "field_name": "dataset", "term": ""}).json()
    assert str(shared_lab.dataset.pk) in {r["id"] for r in found["results"]}
    olga = shared_lab.olga
    content_row_save(user=olga, obj=Item(dataset=shared_lab.dataset, external_id="olgas-1", question="Hers?",
                                         choices=YES_NO_CHOICES, gold_answer="yes", split="train"), changed=())
    content_row_save(user=olga, obj=Rationale(item=Item.objects.get(external_id="olgas-1"), source=shared_lab.source,
                                              text="Olga's rationale."), changed=())
    assert Rationale.objects.filter(source=shared_lab.source, item__external_id="olgas-1").exists()
