"""Cells of a re-signed bundle that no database can hold, and the line a row error names.

A time whose UTC time is past what Python and the databases hold (0001-01-01T00:00:00+14:00 is
before year 1 in UTC) was an OverflowError (a 500) on SQLite and, on PostgreSQL, a study whose every
later read failed; a text cell with a NUL was a 500 on PostgreSQL and kept on SQLite; and after a
cell spanning lines, a row error named the record's count, not the CSV line it starts on. Each is
now refused by file, line, field and reason, and nothing is kept."""
from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from scoring.services.bundle import BundleError, bundle_import
from studies.models import Study
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.scoring.test_bundle import _bundle, _edited_rows, _worked_study
from tests.scoring.test_bundle_answerer_sources import api

pytestmark = pytest.mark.django_db

NUL_REASON = "the text contains a NUL character (\\x00), which no text can hold"


def _refused(data: bytes) -> set[tuple]:
    studies = Study.objects.count()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="hostile-copy", owner=None)
    assert Study.objects.count() == studies  # all or nothing
    return {(e.record, e.line, e.field, e.reason) for e in refused.value.errors}


def _out_of_range(text: str) -> str:
    return f"{text!r} is not a time a study can have (from 1970 to 2099, in UTC)"


def test_a_time_past_what_a_database_holds_is_refused_by_row():
    early, late = "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"  # both past year 1..9999 in UTC
    data = _bundle(_worked_study())
    data = _edited_rows(data, "data/tasks.csv", (0, {"expires_at": early}), (1, {"created_at": late}))
    data = _edited_rows(data, "data/annotations.csv", (0, {"answered_at": "1969-12-31T23:59:59+00:00"}))

    errors = _refused(data)

    assert {("data/tasks.csv", 2, "expires_at", _out_of_range(early)),
            ("data/tasks.csv", 3, "created_at", _out_of_range(late)),
            ("data/annotations.csv", 2, "answered_at", _out_of_range("1969-12-31T23:59:59+00:00"))} <= errors


def test_a_text_cell_with_a_nul_is_refused_by_row():
    data = _edited_rows(_bundle(_worked_study()), "data/items.csv",
                        (0, {"external_id": "item\x00-0"}), (1, {"question": "Question\x00 number 1?"}),
                        (2, {"gold_rationale": "Because\x00 it is."}))

    errors = _refused(data)

    assert {("data/items.csv", 2, "external_id", NUL_REASON), ("data/items.csv", 3, "question", NUL_REASON),
            ("data/items.csv", 4, "gold_rationale", NUL_REASON)} <= errors


def test_a_text_cell_with_a_nul_is_a_400_through_the_api_naming_the_file_line_and_field():
    dana, _ = researcher_without_reference_views("dana")
    data = _edited_rows(_bundle(_worked_study()), "data/items.csv", (0, {"external_id": "item\x00-0"}))
    studies = Study.objects.count()

    response = api(dana).post("/api/v1/studies/import-bundle/",
                              {"file": SimpleUploadedFile("bundle.zip", data, content_type="application/zip"),
                               "name": "hostile-copy"}, format="multipart")

    assert response.status_code == 400, response.content[:300]
    assert ("data/items.csv", 2, "external_id", NUL_REASON) in {
        (e["record"], e["line"], e["field"], e["reason"]) for e in response.json()["errors"]}
    assert Study.objects.count() == studies


def test_a_row_after_a_cell_spanning_lines_is_named_by_the_csv_line_it_starts_on():
    # item 0's question spans lines 2 and 3 (a new item of the copy's dataset); item 1's row is line 4
    data = _edited_rows(_bundle(_worked_study()), "data/items.csv",
                        (0, {"external_id": "item-0-copy", "question": "Question number 0,\non two lines?"}),
                        (1, {"metadata": "[1]"}))

    errors = _refused(data)

    assert ("data/items.csv", 4, "metadata", "expected a JSON object") in errors
    assert not [e for e in errors if e[0] == "data/items.csv" and e[1] in (2, 3)]


def test_an_unreadable_record_is_named_by_the_csv_line_it_starts_on():
    # item 1's row (line 4, after item 0's two lines) has a cell past the csv module's field limit
    data = _edited_rows(_bundle(_worked_study()), "data/items.csv",
                        (0, {"external_id": "item-0-copy", "question": "Question number 0,\non two lines?"}),
                        (1, {"metadata": "x" * 200_000}))

    errors = _refused(data)

    assert [e[:2] for e in errors if e[3].startswith("unreadable CSV")] == [("data/items.csv", 4)]
