"""The OpenAPI schema lists the ``ordering`` terms each list accepts, the same ones
``lab.api.filters.StrictOrderingFilter`` lets through.

Before: the schema described ``ordering`` as a bare string ("Which field to use when ordering the
results."), so a client learnt which terms a list takes only from the 400 a wrong one gets."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db

# The fields a 400 for an unknown term says the list orders by (``StrictOrderingFilter.get_ordering``).
ORDERS_BY = re.compile(r"It orders by: (.*) \(a leading '-'")


def ordering_parameters(schema):
    for path, item in schema["paths"].items():
        for parameter in item.get("get", {}).get("parameters", []):
            if parameter["name"] == "ordering":
                yield path, parameter


def test_every_list_documents_ordering_as_a_comma_separated_list_of_terms(schema):
    documented = dict(ordering_parameters(schema))
    assert {"/api/v1/annotations/", "/api/v1/scores/", "/api/v1/studies/", "/api/v1/items/"} <= set(documented)
    for path, parameter in documented.items():
        assert parameter["schema"]["type"] == "array", path
        assert parameter["schema"]["items"]["type"] == "string", path
        assert (parameter["style"], parameter["explode"]) == ("form", False), path
        for term in parameter["schema"]["items"]["enum"]:
            assert f"`{term}`" in parameter["description"], (path, term)


def test_the_documented_ordering_terms_are_exactly_those_the_list_accepts(schema, client_for, study_data):
    """Checked against the API itself, not the filter's code: each list's 400 for an unknown term
    names the fields it orders by, and the schema lists each of them and its ``-`` form, no more;
    every listed term, alone or all together comma-separated, is a 200."""
    client = client_for(study_data.study.owner)
    annotations = dict(ordering_parameters(schema))["/api/v1/annotations/"]["schema"]["items"]["enum"]
    assert annotations == ["answered_at", "-answered_at", "id", "-id"]
    assert "worker_raw_id" not in annotations and "-worker_raw_id" not in annotations
    assert client.get("/api/v1/annotations/", {"ordering": "-worker_raw_id"}).status_code == 400

    for path, parameter in ordering_parameters(schema):
        terms = parameter["schema"]["items"]["enum"]
        refused = client.get(path, {"ordering": "not_a_field"})
        assert refused.status_code == 400, (path, refused.content[:300])
        (message,) = refused.json()["ordering"]
        fields = ORDERS_BY.search(message).group(1).split(", ")
        assert sorted(terms) == sorted([*fields, *(f"-{field}" for field in fields)]), path
        assert "not_a_field" not in terms
        for term in terms:
            response = client.get(path, {"ordering": term})
            assert response.status_code == 200, (path, term, response.content[:300])
        together = client.get(path, {"ordering": ",".join(terms)})
        assert together.status_code == 200, (path, together.content[:300])
