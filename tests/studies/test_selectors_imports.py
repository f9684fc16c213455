"""Who reads an import record (``import_records_for_user``), the one rule of the API and the admin:
its researcher, whoever may read what it imported into (the study of an outcomes or bundle import,
the dataset of any other), and superusers. ``studies.view_importrecord`` opens the feature, never
another researcher's imports: a record tells its file's name, its counts and what it touched.

Alice imports; Bob holds ``studies.view_importrecord`` (every model permission but those that read
all reference data) and reads only his own imports and those into what he may read."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from scoring.services import outcomes_study_create
from studies.models import StudyShare
from studies.selectors import import_records_for_user
from studies.services.importers import items_import_strategyqa
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import RationaleSourceFactory
from tests.studies.test_admin_visibility import api_client, olga_shares_a_study_with_lee

pytestmark = pytest.mark.django_db


def _strategyqa(tmp_path, name: str, qids: list[str]):
    path = tmp_path / f"{name}_test.json"
    path.write_text(json.dumps([{"qid": q, "question": f"Is {q} true?", "answer": True, "facts": []} for q in qids]))
    return path


@pytest.fixture
def lab(tmp_path):
    alice, _ = staff_client("alice")
    bob, _ = researcher_without_reference_views("bob")
    assert bob.has_perm("studies.view_importrecord") and not bob.has_perm("studies.view_dataset")
    records = {
        "alice-shared": items_import_strategyqa(file=_strategyqa(tmp_path, "a1", ["a1", "a2"]),
                                                dataset_name="alice-ds", user=alice),
        "alice-private": items_import_strategyqa(file=_strategyqa(tmp_path, "a2", ["p1"]),
                                                 dataset_name="alice-private-ds", user=alice),
        "bob": items_import_strategyqa(file=_strategyqa(tmp_path, "b1", ["b1"]), dataset_name="bob-ds", user=bob),
    }
    return {"alice": alice, "bob": bob, "records": records}


def _seen(user) -> set:
    return set(import_records_for_user(user=user))


def test_the_view_permission_alone_opens_no_other_researchers_import(lab):
    records = lab["records"]

    assert _seen(lab["bob"]) == {records["bob"]}  # his own, though no study of his uses bob-ds
    assert _seen(lab["alice"]) >= {records["alice-shared"], records["alice-private"]}


def test_a_study_shared_with_the_reader_to_change_opens_the_item_imports_into_its_dataset_only(lab):
    """An item import counts the whole dataset's rows of its file: a view share (which reads the
    study's items, not the rest of its dataset) opens none, a change share (design rights,
    ``datasets_for_design``) those into the study's dataset."""
    alice, bob, records = lab["alice"], lab["bob"], lab["records"]
    study = study_create(name="alices-study", dataset=records["alice-shared"].dataset,
                         sources=[RationaleSourceFactory(name="alice-src")], owner=alice, user=alice)
    study_share(study=study, user=alice, with_user=bob)
    assert _seen(bob) == {records["bob"]}

    study_share(study=study, user=alice, with_user=bob, level=StudyShare.Level.CHANGE)
    assert _seen(bob) == {records["bob"], records["alice-shared"]}


def _api_ids(user) -> set[int]:
    return {row["id"] for row in api_client(user).get("/api/v1/imports/").json()["results"]}


def _admin_ids(client) -> set[int]:
    page = client.get(reverse("admin:studies_importrecord_changelist"))
    assert page.status_code == 200
    return {record.pk for record in page.context["cl"].result_list}


def test_a_view_share_does_not_open_the_item_import_of_the_owners_unshown_items(tmp_path):
    """Olga imports 5 train items (no study draws them) into the dataset of the study she shares with
    Lee for viewing: the record (its file's name, SHA-256, counts, ``summary["splits"]``, column
    mapping) is not Lee's to read, in the selector, the API or the admin."""
    lab = olga_shares_a_study_with_lee(tmp_path)
    record = lab.items_record
    assert record.summary["splits"] == {"train": 5}

    assert record not in import_records_for_user(user=lab.lee)
    assert record.pk not in _api_ids(lab.lee)
    assert lab.clients["lee"].get(f"/api/v1/imports/{record.pk}/").status_code == 404
    assert record.pk not in _admin_ids(lab.clients["lee"])
    response = lab.clients["lee"].get(reverse("admin:studies_importrecord_change", args=[record.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("admin:index")


def test_the_importer_and_a_library_reader_still_read_the_item_import(tmp_path):
    lab = olga_shares_a_study_with_lee(tmp_path)
    records = {lab.items_record.pk, lab.rationales_record.pk}

    for who, user in (("olga", lab.olga), ("carol", lab.carol)):
        assert records <= set(import_records_for_user(user=user).values_list("pk", flat=True)), who
        assert records <= _api_ids(user), who
        assert records <= _admin_ids(lab.clients[who]), who


def test_an_outcomes_import_follows_its_study_not_its_dataset(lab, strategyqa_dir, utility_file_lines):
    alice, bob = lab["alice"], lab["bob"]
    dataset = items_import_strategyqa(file=strategyqa_dir / "strategyqa_processed_test.json",
                                      dataset_name="StrategyQA").dataset  # by the operator
    # Bob may read the dataset: his own study uses it.
    study_create(name="bobs-study", dataset=dataset, sources=[RationaleSourceFactory(name="bob-src")], owner=bob)
    outcomes, _ = outcomes_study_create(name="alices-outcomes", dataset=dataset, file=utility_file_lines,
                                        owner=alice, user=alice)
    record = import_records_for_user(user=alice).get(kind="outcomes")
    assert record.dataset == dataset and record.summary["study"] == outcomes.pk

    assert record not in _seen(bob)  # it names her study, its sources, what they scored
    study_share(study=outcomes, user=alice, with_user=bob)
    assert record in _seen(bob)


def test_superusers_read_every_import_and_inactive_users_none(lab):
    root = get_user_model().objects.create_superuser("root", password="pw")
    assert _seen(root) == set(lab["records"].values())
    lab["bob"].is_active = False
    assert _seen(lab["bob"]) == set()


def test_the_rule_is_one_query(lab, django_assert_num_queries):
    bob = lab["bob"]
    _seen(bob)  # his permissions, read once per user object
    with django_assert_num_queries(1):
        assert len(_seen(bob)) == 1


@pytest.fixture
def utility_file_lines(strategyqa_dir, tmp_path):
    """Two lines of the released outcomes (gpt3's)."""
    rows = [line for line in (strategyqa_dir / "rationale_utility.json").read_text().splitlines()
            if '"rationale_source":"gpt3"' in line][:2]
    path = tmp_path / "gpt3.json"
    path.write_text("\n".join(rows) + "\n")
    return path



def test_the_imports_list_is_in_the_order_it_says(tmp_path):
    """``/api/v1/imports/`` said "newest first" and listed oldest first (the pager's id order, which
    every link a client saved pages by): it now says oldest first, and ``?ordering=-imported_at``
    gives newest first."""
    from drf_spectacular.generators import SchemaGenerator

    alice, _ = staff_client("alice")
    made = [items_import_strategyqa(file=_strategyqa(tmp_path, f"n{i}", [f"n{i}"]), dataset_name=f"ds-{i}",
                                    user=alice).pk for i in range(3)]
    client = api_client(alice)
    assert [row["id"] for row in client.get("/api/v1/imports/").json()["results"]] == made
    newest = client.get("/api/v1/imports/", {"ordering": "-imported_at"}).json()["results"]
    assert [row["id"] for row in newest] == made[::-1]
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    for path in ("/api/v1/imports/", "/api/v1/import-jobs/"):
        description = paths[path]["get"]["description"]
        assert "oldest first" in description and "newest first" in description.split("gives")[-1], description
