"""A rationales import names its sources in its record (``summary``: ``per_source`` with each
source's row count, ``sources_created``, ``sources_with_highlights``), so reading the dataset is not
enough to read it: another researcher reads the record only when they may also read every source it
names (``import_records_for_user``, by the ids the importer stores in ``summary["source_ids"]``), in
the API's import list and the admin's alike.

Alice (every permission) imports "shared-ds" and her rationales under her new source
"alice-private". Bob (who reads only what his studies use) reads "shared-ds" through his own study,
which does not list her source."""
from __future__ import annotations

import pytest
from django.urls import reverse

from studies.models import ImportRecord, Item, RationaleSource
from studies.selectors import import_records_for_user, sources_for_user
from studies.services.importers import items_import_table, rationales_import
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

FILENAME = "alice-private-rationales.jsonl"


@pytest.fixture
def lab(tmp_path):
    alice, alice_client = staff_client("alice")
    bob, bob_client = researcher_without_reference_views("bob")
    items_import_table(file=write_jsonl(tmp_path / "items_test.jsonl", [
        {"id": f"q{i}", "question": f"Shared question {i}?", "answer": "yes"} for i in range(2)]),
        dataset_name="shared-ds", task_format="yes_no", user=alice)
    rationales_import(file=write_jsonl(tmp_path / "bob.jsonl", [
        {"item_id": "q0", "source": "bob-src", "rationale": "Bob's."}]), dataset_name="shared-ds")  # the operator
    dataset = Item.objects.get(external_id="q0").dataset
    study_create(name="bobs-study", dataset=dataset, sources=[RationaleSource.objects.get(name="bob-src")],
                 owner=bob)
    record = rationales_import(file=write_jsonl(tmp_path / FILENAME, [
        {"item_id": f"q{i}", "source": "alice-private", "rationale": f"Alice's {i}."} for i in range(2)]),
        dataset_name="shared-ds", user=alice)
    source = RationaleSource.objects.get(name="alice-private")
    assert record.summary["per_source"] == {"alice-private": 2}
    assert record.summary["source_ids"] == [source.pk]
    assert not sources_for_user(user=bob).filter(pk=source.pk).exists()
    return {"alice": alice, "bob": bob, "clients": {"alice": alice_client, "bob": bob_client},
            "record": record, "source": source, "dataset": dataset}


def _api_ids(client) -> set[int]:
    response = client.get("/api/v1/imports/")
    assert response.status_code == 200
    return {row["id"] for row in response.json()["results"]}


def _admin_lists(client, record: ImportRecord) -> bool:
    response = client.get(reverse("admin:studies_importrecord_changelist"))
    assert response.status_code == 200
    return reverse("admin:studies_importrecord_change", args=[record.pk]) in response.content.decode()


def _sees(lab, who: str) -> bool:
    """Whether ``who`` reads Alice's record, in the API and in the admin (the two must agree)."""
    client, record = lab["clients"][who], lab["record"]
    in_api, in_admin = record.pk in _api_ids(client), _admin_lists(client, record)
    assert in_api == in_admin
    return in_api


def test_a_reader_of_the_dataset_does_not_read_an_import_naming_a_source_hidden_from_them(lab):
    assert not _sees(lab, "bob")
    assert _sees(lab, "alice")
    # His own reading of the dataset still shows the imports that name only what he reads.
    bobs = ImportRecord.objects.get(kind="rationales", summary__per_source__has_key="bob-src")
    assert bobs in import_records_for_user(user=lab["bob"])


def test_sharing_the_source_with_the_reader_opens_the_record(lab):
    alice, bob = lab["alice"], lab["bob"]
    # A source is shared as the app shares it: a study listing it, shared with the reader.
    study = study_create(name="alices-study", dataset=lab["dataset"], sources=[lab["source"]], owner=alice,
                         user=alice)
    study_share(study=study, user=alice, with_user=bob)

    assert _sees(lab, "bob")


def test_an_import_naming_a_hidden_source_and_a_readable_one_stays_hidden(lab, tmp_path):
    alice, bob = lab["alice"], lab["bob"]
    public = rationales_import(file=write_jsonl(tmp_path / "public.jsonl", [
        {"item_id": "q0", "source": "alice-public", "rationale": "Alice's, shown to Bob."}]),
        dataset_name="shared-ds", user=alice)
    study = study_create(name="alices-study", dataset=lab["dataset"],
                         sources=[RationaleSource.objects.get(name="alice-public")], owner=alice, user=alice)
    study_share(study=study, user=alice, with_user=bob)
    both = rationales_import(file=write_jsonl(tmp_path / "both.jsonl", [
        {"item_id": "q1", "source": "alice-public", "rationale": "Alice's public one."},
        {"item_id": "q1", "source": "alice-private", "rationale": "Alice's private one."}]),
        dataset_name="shared-ds", user=alice)

    assert public in import_records_for_user(user=bob)
    assert both not in import_records_for_user(user=bob)
    assert both in import_records_for_user(user=alice)


def test_a_record_from_before_source_ids_is_its_importers_unless_the_reader_reads_every_source(lab):
    """Records imported before the importer stored ``source_ids`` have only the names (the key is
    dropped here, as no import writes such a record any more)."""
    record = lab["record"]
    record.summary.pop("source_ids")
    record.save(update_fields=["summary"])
    bobs = ImportRecord.objects.get(kind="rationales", summary__per_source__has_key="bob-src")
    bobs.summary.pop("source_ids")
    bobs.save(update_fields=["summary"])
    carol, _ = staff_client("carol")  # reads every source and dataset

    assert record not in import_records_for_user(user=lab["bob"])
    assert bobs not in import_records_for_user(user=lab["bob"])  # the operator's: named sources unknown
    assert {record, bobs} <= set(import_records_for_user(user=carol))
    assert record in import_records_for_user(user=lab["alice"])
