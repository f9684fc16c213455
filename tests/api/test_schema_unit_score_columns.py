"""The OpenAPI schema of /api/v1/scores/ documents the columns the unit's run computed its scores
with, which answers it counted among them, as the scores export names and describes them."""
from __future__ import annotations

import pytest

from scoring.api.export_units import SCORE_COLUMNS, SCORED_WITH_COLUMNS

pytestmark = pytest.mark.django_db

OPENAPI_TYPES = {"int": "integer", "str": "string", "bool": "boolean", "float": "number"}


def test_the_unit_score_schema_lists_the_exports_counting_columns_with_their_descriptions(schema):
    unit_score = schema["components"]["schemas"]["UnitScore"]
    properties = unit_score["properties"]
    exported = {c.name: c for c in SCORE_COLUMNS}
    names = ["reported_utility", *SCORED_WITH_COLUMNS]
    assert {"counted_answers", "counted_tasks_failing_a_check", "other_readings"} <= set(names)
    for name in names:
        column = exported[name]
        assert name in properties, name
        field = properties[name]
        assert field["type"] == OPENAPI_TYPES[column.kind], name
        assert field.get("nullable") is True, name
        assert " ".join(field["description"].split()) == " ".join(column.description.split()), name
    assert set(SCORED_WITH_COLUMNS) <= set(unit_score.get("required", []))  # always present, maybe null
    assert all(properties[name].get("readOnly") for name in SCORED_WITH_COLUMNS)
