"""A rationales import names its sources among those the importing user may build on
(``sources_for_design``; here, those they may see): a name held by another researcher's source the user may not see is refused
by row and field, saying only that the name is taken, and nothing of that source (its rationales,
its highlights flag) is read, compared or written; the operator imports as before."""
from __future__ import annotations

import pytest

from studies.models import ImportRecord, Item, Rationale, RationaleSource
from studies.selectors import sources_for_user
from studies.services.importers import ImportValidationError, items_import_table, rationales_import
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

SECRET = "ALICE-PRIVATE-RATIONALE"


@pytest.fixture
def lab(tmp_path):
    """Alice (every permission) imports the dataset "shared-ds" and her rationales for q0 under her
    source "alice-private", which no study of Bob's lists. Bob (who reads only what his studies
    use) has a draft study on "shared-ds" with his own source "bob-src"."""
    alice, _ = staff_client("alice")
    bob, _ = researcher_without_reference_views("bob")
    items_import_table(file=write_jsonl(tmp_path / "items_test.jsonl", [
        {"id": f"q{i}", "question": f"Shared question {i}?", "answer": "yes"} for i in range(3)]),
        dataset_name="shared-ds", task_format="yes_no", user=alice)
    rationales_import(file=write_jsonl(tmp_path / "alice.jsonl", [
        {"item_id": "q0", "source": "alice-private", "rationale": SECRET}]), dataset_name="shared-ds", user=alice)
    rationales_import(file=write_jsonl(tmp_path / "bob.jsonl", [
        {"item_id": f"q{i}", "source": "bob-src", "rationale": f"Bob's {i}."} for i in range(3)]),
        dataset_name="shared-ds")  # by the operator
    dataset = Item.objects.get(external_id="q0").dataset
    study_create(name="bobs-study", dataset=dataset, sources=[RationaleSource.objects.get(name="bob-src")],
                 owner=bob)
    assert not sources_for_user(user=bob).filter(name="alice-private").exists()
    return {"alice": alice, "bob": bob}


def _alices_rows() -> list:
    return sorted(Rationale.objects.filter(source__name="alice-private").values_list("item__external_id", "text"))


def _bobs_refusal(path, **options) -> ImportValidationError:
    with pytest.raises(ImportValidationError) as refused:
        rationales_import(file=path, dataset_name="shared-ds", user=options.pop("user"), **options)
    return refused.value


def test_a_source_the_importer_may_not_see_is_refused_and_nothing_is_written(lab, tmp_path):
    records = ImportRecord.objects.count()
    path = write_jsonl(tmp_path / "r.jsonl", [
        {"item_id": "q0", "source": "alice-private", "rationale": "Overwritten."},
        {"item_id": "q1", "source": "alice-private", "rationale": "Planted.", "highlights": [[0, 6]]},
        {"item_id": "q2", "source": "bob-src", "rationale": "Bob's better wording."},
        {"item_id": "q2", "source": "bob-new", "rationale": "A new source of Bob's."},
    ])

    refused = _bobs_refusal(path, user=lab["bob"])

    assert [(e.line, e.field) for e in refused.errors] == [(1, "source"), (2, "source")]
    assert {e.reason for e in refused.errors} == {
        "the source name 'alice-private' is taken by a source you may not see: choose another source name"}
    assert _alices_rows() == [("q0", SECRET)]  # not overwritten, nothing added
    assert not RationaleSource.objects.get(name="alice-private").has_highlights
    # All or nothing: neither his own rows nor his new source, and no record of the file.
    assert Rationale.objects.get(item__external_id="q2", source__name="bob-src").text == "Bob's 2."
    assert not RationaleSource.objects.filter(name="bob-new").exists()
    assert ImportRecord.objects.count() == records


def test_the_answer_is_the_same_whether_a_guess_matches_the_hidden_row(lab, tmp_path):
    def said(guess: str) -> list:
        path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "q0", "source": "alice-private", "rationale": guess}])
        return [e.as_dict() for e in _bobs_refusal(path, user=lab["bob"]).errors]

    assert said(SECRET) == said("A wrong guess.")
    assert _alices_rows() == [("q0", SECRET)]


def test_a_hidden_source_named_for_the_whole_file_is_refused(lab, tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "q1", "rationale": "Planted."}])

    refused = _bobs_refusal(path, user=lab["bob"], source_name="alice-private")

    assert [(e.line, e.field) for e in refused.errors] == [(None, "source")]
    assert "taken by a source you may not see" in str(refused)
    assert _alices_rows() == [("q0", SECRET)]


def test_the_sources_owner_and_the_operator_import_into_it_as_before(lab, tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "q1", "source": "alice-private", "rationale": "Hers."}])
    rationales_import(file=path, dataset_name="shared-ds", user=lab["alice"])
    path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "q2", "source": "alice-private", "rationale": "Ops."}])
    rationales_import(file=path, dataset_name="shared-ds")
    # Bob imports into a source he may see, and makes a new one.
    path = write_jsonl(tmp_path / "r.jsonl", [{"item_id": "q0", "source": "bob-src", "rationale": "Reworded."},
                                              {"item_id": "q0", "source": "bob-new", "rationale": "New."}])
    record = rationales_import(file=path, dataset_name="shared-ds", user=lab["bob"])

    assert _alices_rows() == [("q0", SECRET), ("q1", "Hers."), ("q2", "Ops.")]
    assert record.summary["sources_created"] == ["bob-new"]
    assert Rationale.objects.get(item__external_id="q0", source__name="bob-src").text == "Reworded."
