"""``lab.jsontext``: a JSON number that is not finite cannot be stored either.

Python's parser reads ``NaN``, ``Infinity`` and ``-Infinity`` and turns ``1e400`` into infinity; no
JSON column holds them (SQLite's ``JSON_VALID``, PostgreSQL's ``jsonb``). ``json_problems`` names
each with its path, so every caller refuses it where it already refuses a NUL: the import readers
(tests/studies/test_importers_reading.py), ``load_json`` (the API's parser, a bundle's JSON cells)."""
from __future__ import annotations

import io
import json
import re

import pytest
from rest_framework.exceptions import ParseError

from lab.api.parsers import DepthLimitedJSONParser
from lab.jsontext import UnstorableText, json_problems, load_json
from scoring.services.bundle import BundleError, bundle_import
from studies.models import Study
from tests.scoring.test_bundle import _bundle, _edited_rows, _worked_study


def test_json_problems_names_every_non_finite_number_with_its_path():
    value = json.loads('{"a": NaN, "b": [1, 2.5, Infinity, {"c": -Infinity}], "d": 1e400, "e": -1e400,'
                       ' "ok": [0.0, -0.0, 1e308, 10000000000000000000000000000000, true, null]}')
    found = dict(json_problems(value))
    assert set(found) == {("a",), ("b", 2), ("b", 3, "c"), ("d",), ("e",)}
    assert found[("a",)] == "the number is NaN (not a number), which JSON cannot hold"
    assert found[("b", 2)].startswith("the number is Infinity (or a number too large to store")
    assert found[("b", 3, "c")].startswith("the number is -Infinity (or a number too large to store, such as -1e400)")
    assert found[("d",)] == found[("b", 2)] and found[("e",)] == found[("b", 3, "c")]


def test_a_non_finite_number_alone_is_a_problem_at_the_document():
    assert [path for path, _ in json_problems(float("nan"))] == [()]
    assert list(json_problems(1.5)) == []


@pytest.mark.parametrize(("text", "where"), [('{"x": [1, 1e400]}', "x[1]"), ("NaN", "the document")])
def test_load_json_refuses_a_non_finite_number_saying_where(text, where):
    with pytest.raises(UnstorableText, match=rf"^at {re.escape(where)}: the number is "):
        load_json(text)


def test_the_api_parser_refuses_a_number_too_large_as_a_parse_error():
    # NaN and Infinity were already refused (STRICT_JSON); 1e400 was read as infinity.
    with pytest.raises(ParseError, match=r"at score: the number is Infinity"):
        DepthLimitedJSONParser().parse(io.BytesIO(b'{"score": 1e400}'))


@pytest.mark.django_db
def test_a_bundle_json_cell_with_nan_is_refused_by_row():
    data = _edited_rows(_bundle(_worked_study()), "data/items.csv", (0, {"metadata": '{"x": NaN}'}))
    studies = Study.objects.count()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="nan-copy", owner=None)
    assert Study.objects.count() == studies
    assert ("data/items.csv", 2, "metadata") in {(e.record, e.line, e.field) for e in refused.value.errors}
    reason = next(e.reason for e in refused.value.errors if e.field == "metadata")
    assert reason == "at x: the number is NaN (not a number), which JSON cannot hold"
