"""Moving a content row on the admin's change page (a rationale's source or item, a generalization
question's item, an item's dataset) is checked as adding it where it lands
(``studies.services.content.content_row_save``): a row is not moved into a study another researcher
owns, as it may not be added there, and a refused move leaves the row where it was."""
from __future__ import annotations

import pytest
from django.urls import reverse

from annotations.models import Unit
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import Dataset, GeneralizationQuestion, Item, Rationale, RationaleSource, Study
from studies.services.content import ContentNotYours, content_row_save
from studies.services.importers import generalization_questions_import, items_import_table, rationales_import
from studies.services.studies import study_create
from tests.admin_forms import admin_form_data
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_json, write_jsonl

pytestmark = pytest.mark.django_db

PLANTED = "ALICE PLANTED"


def _items(tmp_path, dataset: str, ids: list[str], *, user, split: str = "test") -> None:
    items_import_table(file=write_jsonl(tmp_path / f"{dataset}_{split}.jsonl", [
        {"id": i, "question": f"Question {i} of {dataset}?", "answer": "yes"} for i in ids]),
        dataset_name=dataset, task_format="yes_no", user=user)


def _rationales(tmp_path, dataset: str, source: str, ids: list[str], *, user, text: str = "") -> RationaleSource:
    rationales_import(file=write_jsonl(tmp_path / f"{source}_{'_'.join(ids)}.jsonl", [
        {"item_id": i, "source": source, "rationale": text or f"{source} on {i}."} for i in ids]),
        dataset_name=dataset, user=user)
    return RationaleSource.objects.get(name=source)


@pytest.fixture
def lab(tmp_path):
    """Alice (every permission, no superuser) and Bob's draft study on "shared-ds", drawing q0-q2,
    whose source "bob-src" has no rationale for q2 yet; Alice's own dataset and source."""
    alice, alice_client = staff_client("alice")
    bob, _ = researcher_without_reference_views("bob")
    _items(tmp_path, "shared-ds", ["q0", "q1", "q2"], user=None)
    bob_src = _rationales(tmp_path, "shared-ds", "bob-src", ["q0", "q1"], user=None)
    study = study_create(name="bobs-study", dataset=Item.objects.get(external_id="q0").dataset, sources=[bob_src],
                         owner=bob, consent_text="I agree.")
    assert study.items.filter(external_id="q2").exists()
    _items(tmp_path, "alice-ds", ["a0"], user=alice)
    return {"tmp": tmp_path, "alice": alice, "client": alice_client, "bob": bob, "study": study, "bob_src": bob_src}


def _post_change(client, model, obj, **values):
    """Post ``obj``'s admin change form as the page shows it, with ``values`` changed; the
    response after its redirect."""
    url = reverse(f"admin:studies_{model._meta.model_name}_change", args=[obj.pk])
    page = client.get(url)
    assert page.status_code == 200
    data = admin_form_data(page)
    data.update(values)
    return client.post(url, data, follow=True)


def _messages(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def test_a_rationale_is_not_moved_to_the_source_of_another_researchers_study(lab):
    # Adding it there is refused to Alice (the importer's rule) ...
    with pytest.raises(Exception, match="used by a study you may not change"):
        _rationales(lab["tmp"], "shared-ds", "bob-src", ["q2"], user=lab["alice"], text=PLANTED)
    # ... and so is moving her own rationale there on the change page.
    _rationales(lab["tmp"], "shared-ds", "alice-src", ["q2"], user=lab["alice"], text=PLANTED)
    mine = Rationale.objects.get(source__name="alice-src")
    response = _post_change(lab["client"], Rationale, mine, source=lab["bob_src"].pk)
    assert response.status_code == 200
    assert "used by a study you may not change" in _messages(response)
    mine.refresh_from_db()
    assert mine.source.name == "alice-src" and mine.item.external_id == "q2"
    assert not Rationale.objects.filter(source=lab["bob_src"], item__external_id="q2").exists()
    # Bob's study, opened, shows none of Alice's text.
    study_open(study=lab["study"], user=OPERATOR)
    assert Unit.objects.filter(study=lab["study"]).exists()
    assert not Unit.objects.filter(study=lab["study"], rationale__text=PLANTED).exists()


def test_a_rationale_is_not_moved_to_an_item_another_researchers_study_drew(lab):
    bob_src = lab["bob_src"]
    _items(lab["tmp"], "shared-ds", ["t9"], user=None, split="train")  # drawn by no study
    rationales_import(file=write_jsonl(lab["tmp"] / "t9.jsonl", [
        {"item_id": "t9", "source": "bob-src", "rationale": PLANTED}]), dataset_name="shared-ds", user=None)
    planted = Rationale.objects.get(source=bob_src, item__external_id="t9")
    with pytest.raises(ContentNotYours):  # the service the page calls, for a user who may read both parents
        planted.item = Item.objects.get(external_id="q2")
        content_row_save(user=lab["alice"], obj=planted, changed=["item"])
    assert Rationale.objects.get(pk=planted.pk).item.external_id == "t9"


def test_a_generalization_question_is_not_moved_onto_an_item_another_researchers_study_drew(lab):
    gen = study_create(name="bobs-gen", kind=Study.Kind.GENERALIZATION, dataset=lab["study"].dataset,
                       sources=[lab["bob_src"]], owner=lab["bob"], consent_text="I agree.")
    assert gen.items.filter(external_id="q2").exists()
    generalization_questions_import(file=write_json(lab["tmp"] / "gen_test.json", {
        "Question a0 of alice-ds?": [[f"{PLANTED} GQ?", "True", "rephrase"]]}), dataset_name="alice-ds",
        user=lab["alice"])
    gq = GeneralizationQuestion.objects.get(text=f"{PLANTED} GQ?")
    response = _post_change(lab["client"], GeneralizationQuestion, gq, item=Item.objects.get(external_id="q2").pk)
    assert response.status_code == 200
    assert "used by a study you may not change" in _messages(response)
    gq.refresh_from_db()
    assert gq.item.external_id == "a0"


def test_an_item_is_moved_into_a_dataset_another_researchers_study_uses_only_as_an_import_adds_one(lab):
    """An item is used by the studies that drew it (``content_studies``); one moved into the dataset
    of Bob's study is drawn by none of them, as an item Alice imports there: the move leaves Bob's
    study as it was. An item Bob's study drew is not moved out of it."""
    mine = Item.objects.get(external_id="a0")
    before = set(lab["study"].items.values_list("pk", flat=True))
    response = _post_change(lab["client"], Item, mine, dataset=lab["study"].dataset_id)
    assert response.status_code == 200
    mine.refresh_from_db()
    assert mine.dataset_id == lab["study"].dataset_id
    assert set(Study.objects.get(pk=lab["study"].pk).items.values_list("pk", flat=True)) == before
    drawn = lab["study"].items.get(external_id="q2")
    with pytest.raises(ContentNotYours):
        drawn.dataset = Dataset.objects.get(name="alice-ds")
        content_row_save(user=lab["alice"], obj=drawn, changed=["dataset"])
    assert Item.objects.get(pk=drawn.pk).dataset_id == lab["study"].dataset_id


def test_alice_still_moves_a_rationale_between_her_own_unused_sources(lab):
    _rationales(lab["tmp"], "alice-ds", "alice-src", ["a0"], user=lab["alice"])
    other = _rationales(lab["tmp"], "shared-ds", "alice-other", ["q0"], user=lab["alice"])
    mine = Rationale.objects.get(source__name="alice-src")
    response = _post_change(lab["client"], Rationale, mine, source=other.pk)
    assert response.status_code == 200
    assert "used by a study" not in _messages(response)
    mine.refresh_from_db()
    assert mine.source == other and mine.item.external_id == "a0"
