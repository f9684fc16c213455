"""No CSV the app writes lets a spreadsheet run a planted formula (issue 10 item 8).

Item ids, source names and worker ids starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return came out verbatim in ``export/annotations``, ``export/scores`` and ``score_study``'s
``units.csv`` / ``associations.csv``. Every CSV writer neutralises such cells with the one helper
(``lab.spreadsheet.spreadsheet_safe``, OWASP's rule: a leading apostrophe); JSON lines and Parquet
stay exact."""
from __future__ import annotations

import ast
import csv
import io
import json

import pandas as pd
import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from rest_framework.test import APIClient

from lab.spreadsheet import FORMULA_STARTS, spreadsheet_safe
from scoring.models import ScoreRun
from scoring.services import score_run_export, study_score
from studies.api.tokens import api_token_create
from tests.conftest import ROOT
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

ITEM_IDS = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+2", "\tq3", "\rq4"]
SOURCES = ["@SUM(A1:A9)", "-2+3"]
PLANTED = set(ITEM_IDS) | set(SOURCES)


def right_only_for_the_first_source(claim, step):
    if step == "before":
        return "no"
    return "yes" if claim.unit.source.name == SOURCES[0] else "no"


@pytest.fixture
def planted():
    """A scored study whose item ids and source names are formulas (as an imported file can make
    them)."""
    study = open_utility_study(name="planted", quota=1, item_ids=ITEM_IDS, source_names=SOURCES,
                               units_per_task=len(ITEM_IDS))
    work(study, "5f0c0ffee0c0ffee0c0ffee1", answer=right_only_for_the_first_source)
    work(study, "5f0c0ffee0c0ffee0c0ffee2", answer=right_only_for_the_first_source)
    with override_settings(RL_SCORING_SIMILARITY=False):
        run = study_score(study=study, both_directions=True)
    assert run.status == ScoreRun.Status.DONE, run.error
    return study, run


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def assert_neutralised(cells):
    """No cell a spreadsheet would run (a number such as -1 is a number, not a formula)."""
    assert not [c for c in cells if c.startswith(FORMULA_STARTS) and not is_number(c)]
    assert {"'" + v for v in PLANTED} & set(cells), "the planted values should appear, neutralised"


def api_client():
    user = get_user_model().objects.create_superuser(username="root", password="pw-root-123")
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def download(client, url, file_format) -> bytes:
    response = client.get(url, {"file_format": file_format})
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def test_the_helper_follows_owasp():
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert spreadsheet_safe(start + "1") == "'" + start + "1"
    assert spreadsheet_safe("gpt3") == "gpt3" and spreadsheet_safe("") == ""
    assert spreadsheet_safe(-1) == -1 and spreadsheet_safe(-0.5) == -0.5 and spreadsheet_safe(None) is None


@pytest.mark.parametrize("export", ["annotations", "scores"])
def test_api_csv_exports_neutralise_and_jsonl_parquet_stay_exact(planted, export):
    study, _ = planted
    client = api_client()
    url = f"/api/v1/studies/{study.pk}/export/{export}/"
    rows = list(csv.reader(io.StringIO(download(client, url, "csv").decode(), newline="")))
    header, body = rows[0], rows[1:]
    assert body
    assert_neutralised([cell for row in body for cell in row])
    # Numbers stay numbers: a not-useful unit's utility is -1, not '-1.
    utility = header.index("utility")
    assert {row[utility] for row in body if row[utility]} == {"1", "-1"}

    column = "item_external_id"
    jsonl = [json.loads(line) for line in download(client, url, "jsonl").decode().splitlines()]
    assert {r[column] for r in jsonl if r[column]} == set(ITEM_IDS)
    assert {r["source_name"] for r in jsonl if r["source_name"]} == set(SOURCES)
    parquet = pd.read_parquet(io.BytesIO(download(client, url, "parquet")))
    assert set(parquet[column].dropna()) == set(ITEM_IDS)
    assert set(parquet["source_name"].dropna()) == set(SOURCES)


def test_score_study_folder_csvs_neutralise_and_results_json_stays_exact(planted, tmp_path):
    study, run = planted
    written = {p.name: p for p in score_run_export(run=run, out_dir=tmp_path)}
    for name in ("units.csv", "associations.csv", "utility_shares.csv"):
        rows = list(csv.reader(written[name].open(newline="", encoding="utf-8")))
        assert len(rows) > 1, name
        assert_neutralised([cell for row in rows[1:] for cell in row])
    results = json.loads(written["results.json"].read_text())
    assert set(results["utility_shares"]) >= set(SOURCES)


def test_only_the_one_helper_makes_csv_writers():
    """Every CSV is written through ``lab.spreadsheet.csv_writer``: no other module builds a
    ``csv.writer`` / ``csv.DictWriter`` of its own."""
    makers = []
    for app in ("lab", "studies", "annotations", "scoring", "cockpit", "config"):
        for path in (ROOT / app).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Attribute) and node.attr in ("writer", "DictWriter")
                        and isinstance(node.value, ast.Name) and node.value.id == "csv"):
                    makers.append(path.relative_to(ROOT).as_posix())
    assert set(makers) == {"lab/spreadsheet.py"}


def test_the_column_at_a_time_writer_writes_what_the_cell_by_cell_rule_writes():
    """``SafeCSVWriter.writerows`` (a column at a time, the exports' path) against ``writerow`` (a
    cell at a time) on cells made to trip it: formula starts at the start of a cell, after a line
    feed inside one, in the first row, in the last; numbers in a text column; datetimes and their
    text; booleans and None."""
    import random
    from datetime import UTC, datetime

    from lab.spreadsheet import csv_writer

    kinds = ["int", "str", "str", "bool", "datetime", "float", "str"]
    pieces = ["=", "+", "-", "@", "\t", "\r", "\n", ",", '"', "a", "1", "é", " "]
    rng = random.Random(7)

    def text():
        return rng.choice([None, -1, 2.5, "", "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))])

    def row(i):
        return (i, text(), text(), rng.choice([True, False, None]),
                rng.choice([None, datetime(2026, 12, 2, 7, i % 60, tzinfo=UTC), "2026-12-02T07:00:00+00:00"]),
                rng.choice([None, 0.1, -3.25]), rng.choice(["plain", "text", None]))

    for n_rows in (1, 2, 50, 500):
        rows = [row(i) for i in range(n_rows)]
        by_column, by_cell = io.StringIO(), io.StringIO()
        csv_writer(by_column, kinds=kinds).writerows(rows)
        cell_writer = csv_writer(by_cell, kinds=kinds)
        for r in rows:
            cell_writer.writerow(r)
        assert by_column.getvalue() == by_cell.getvalue()
    # Only the first cell of a column is a formula; a line feed then "=" inside a cell (a false alarm).
    rows = [(1, "=SUM(A1)", "b", True, None, 0.5, "c"), (2, "d", "e\n=x", False, None, None, "f")]
    out = io.StringIO()
    csv_writer(out, kinds=kinds).writerows(rows)
    assert list(csv.reader(io.StringIO(out.getvalue(), newline=""))) == [
        ["1", "'=SUM(A1)", "b", "true", "", "0.5", "c"], ["2", "d", "e\n=x", "false", "", "", "f"]]
    empty = io.StringIO()
    csv_writer(empty, kinds=kinds).writerows([])
    assert empty.getvalue() == ""
