"""An ``ordering`` a list cannot order by, and DRF's ``format`` on an export, are 400s naming what
to send instead, never read as something else in silence.

Before: DRF's OrderingFilter dropped a term it did not know, so ``/api/v1/annotations/?ordering=-answerd_at``
answered 200 in the default order (oldest first) to a script paging newest first, while a misspelt
parameter name (``odering``) was a 400. And the exports took their file type from ``file_format``
while accepting DRF's ``format``: ``export/annotations/?format=json`` answered 200 with a CSV, and
``?format=api`` a 404 as if the study were not visible."""
from __future__ import annotations

import pytest

from tests.api.test_exports import download

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("ordering", "bad"), [
    ("-answerd_at", ["-answerd_at"]),
    ("answered_at,idd", ["idd"]),
    ("--id", ["--id"]),
    ("id,", [""]),
    ("-worker_raw_id", ["-worker_raw_id"]),  # raw worker ids are not orderable on purpose
    ("worker", ["worker"]),
])
def test_an_ordering_the_list_cannot_order_by_is_a_400_naming_it(client_for, study_data, ordering, bad):
    response = client_for(study_data.study.owner).get("/api/v1/annotations/", {"page_size": 5, "ordering": ordering})

    assert response.status_code == 400, response.content[:300]
    errors = response.json()
    assert set(errors) == {"ordering"}, errors
    assert len(errors["ordering"]) == len(bad)
    for term, message in zip(bad, errors["ordering"], strict=True):
        assert f"{term!r} is not a field this list can be ordered by" in message
        assert "It orders by: answered_at, id " in message


@pytest.mark.parametrize(("path", "ordering", "listed"), [
    ("/api/v1/scores/", "-updatd_at", "id, updated_at"),
    ("/api/v1/assignments/", "created", "created_at, id"),
    ("/api/v1/studies/", "title", "created_at, id, name"),
    ("/api/v1/items/", "external", "external_id, id"),
])
def test_every_list_refuses_an_ordering_it_does_not_have(client_for, study_data, path, ordering, listed):
    response = client_for(study_data.study.owner).get(path, {"ordering": ordering})

    assert response.status_code == 400, response.content[:300]
    (message,) = response.json()["ordering"]
    assert f"{ordering!r} is not a field" in message and f"It orders by: {listed} " in message


def test_a_valid_ordering_still_orders(client_for, study_data):
    client = client_for(study_data.study.owner)
    newest = client.get("/api/v1/annotations/", {"page_size": 1000, "ordering": "-answered_at, id"})
    assert newest.status_code == 200, newest.content[:300]
    times = [row["answered_at"] for row in newest.json()["results"]]
    assert times == sorted(times, reverse=True) and len(times) == 24
    oldest = client.get("/api/v1/annotations/", {"page_size": 5, "ordering": "answered_at"})
    assert oldest.status_code == 200, oldest.content[:300]
    assert client.get("/api/v1/annotations/", {"ordering": ""}).status_code == 200  # no ordering: the default
    # the browsable API draws the error page without tripping over the ordering again
    page = client.get("/api/v1/annotations/", {"ordering": "-answerd_at", "format": "api"})
    assert page.status_code == 400 and b"answerd_at" in page.content


@pytest.mark.parametrize("export", ["annotations", "scores"])
@pytest.mark.parametrize("value", ["json", "api", "csv", "jsonl", "parquet", ""])
def test_an_export_answers_format_with_a_400_pointing_to_file_format(client_for, study_data, export, value):
    url = f"/api/v1/studies/{study_data.study.pk}/export/{export}/"

    response, body = download(client_for(study_data.study.owner), url, format=value)

    assert response.status_code == 400, (response.status_code, response.get("Content-Type"), body[:200])
    assert response["Content-Type"] == "application/json"
    (message,) = response.json()["format"]
    assert "'file_format'" in message and "csv, jsonl, parquet" in message


@pytest.mark.parametrize("path", ["export/annotations.json", "export/annotations.jsonl", "results.json",
                                  "summary.api", "withdrawals.json", "bundle.json", ""])
def test_no_route_takes_a_format_suffix(client_for, study_data, path):
    """No format-suffix routes: a suffix reached actions that take no ``format`` argument as a 500
    (``results.json``); now no route matches."""
    url = f"/api/v1/studies/{study_data.study.pk}.json" if not path else f"/api/v1/studies/{study_data.study.pk}/{path}"
    response = client_for(study_data.study.owner).get(url)
    assert response.status_code == 404, (url, response.status_code)


def test_an_export_checks_the_study_before_the_format(client_for, study_data, other_study_data):
    """``?format=`` says nothing about a study the caller may not see: 404 as without it."""
    client = client_for(study_data.study.owner)
    response, _ = download(client, f"/api/v1/studies/{other_study_data.study.pk}/export/annotations/", format="api")
    assert response.status_code == 404, response.content[:300]


def test_an_export_without_format_still_takes_file_format(client_for, study_data):
    client = client_for(study_data.study.owner)
    url = f"/api/v1/studies/{study_data.study.pk}/export/annotations/"
    response, body = download(client, url, file_format="jsonl")
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    assert body.count(b"\n") == 24
    response, _ = download(client, url, bogus="x")
    assert response.status_code == 400
    accepted = response.json()["bogus"][0].split("It accepts: ")[1].rstrip(".").split(", ")
    assert "file_format" in accepted and "format" not in accepted  # DRF's format is not the export's
