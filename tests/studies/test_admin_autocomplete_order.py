"""The admin's autocomplete searches (a rationale's source and item, an item's dataset, a
generalization question's item) page through an ordered list: Django pages them with its
``Paginator``, which warns (``UnorderedObjectListWarning``) and may repeat or skip rows between
pages when the list has no order. The dataset and source lists count their rows (a ``GROUP BY``,
where Django drops the model's ``Meta.ordering``), so their admin orders them itself."""
from __future__ import annotations

import warnings

import pytest
from django.core.paginator import UnorderedObjectListWarning

from studies.services.importers import items_import_table, rationales_import
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

SEARCHES = [("item", "dataset"), ("rationale", "source"), ("rationale", "item"), ("generalizationquestion", "item")]


@pytest.fixture
def library(tmp_path):
    """Two datasets, each with two items and rationales of two sources, imported by the operator."""
    for name in ("beta-ds", "alpha-ds"):
        items_import_table(file=write_jsonl(tmp_path / f"{name}_test.jsonl", [
            {"id": f"{name}-q{i}", "question": f"Question {i} of {name}?", "answer": "yes"} for i in range(2)]),
            dataset_name=name, task_format="yes_no")
        rationales_import(file=write_jsonl(tmp_path / f"{name}-r.jsonl", [
            {"item_id": f"{name}-q{i}", "source": source, "rationale": f"Because {i}."}
            for i in range(2) for source in (f"{name}-src-b", f"{name}-src-a")]), dataset_name=name)


def _search(client, model_name: str, field_name: str, term: str = "") -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnorderedObjectListWarning)
        response = client.get("/admin/autocomplete/", {"app_label": "studies", "model_name": model_name,
                                                       "field_name": field_name, "term": term})
    assert response.status_code == 200
    return [row["text"] for row in response.json()["results"]]


@pytest.mark.parametrize(("model_name", "field_name"), SEARCHES)
def test_every_autocomplete_search_pages_an_ordered_list(library, model_name, field_name):
    _, client = staff_client("dana")

    assert _search(client, model_name, field_name)


def test_datasets_and_sources_are_offered_by_name(library):
    _, client = staff_client("dana")

    assert _search(client, "item", "dataset") == ["alpha-ds", "beta-ds"]
    assert _search(client, "rationale", "source", term="src") == [
        "alpha-ds-src-a", "alpha-ds-src-b", "beta-ds-src-a", "beta-ds-src-b"]


def test_a_researcher_who_reads_only_their_studies_gets_an_ordered_list_too(library):
    _, client = researcher_without_reference_views("bob")

    assert _search(client, "item", "dataset") == []
    assert _search(client, "rationale", "source") == []
