"""The OpenAPI schema generates without warnings, documents every operation with a description and
examples, and the docs page works offline (Swagger UI from drf-spectacular-sidecar)."""
from __future__ import annotations

import pytest

from scoring.api.export_annotations import ANNOTATION_COLUMNS
from scoring.api.export_units import SCORE_COLUMNS
from studies.api.tokens import api_token_create

pytestmark = pytest.mark.django_db


def operations(schema):
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield path, method, op


def test_schema_generates_without_warnings(schema):
    assert schema["openapi"].startswith("3.")
    paths = set(schema["paths"])
    for expected in [
        "/api/v1/studies/", "/api/v1/studies/{id}/export/annotations/", "/api/v1/studies/{id}/export/scores/",
        "/api/v1/studies/{id}/results/", "/api/v1/studies/{id}/summary/", "/api/v1/annotations/",
        "/api/v1/imports/", "/api/v1/score-runs/", "/api/v1/generation-jobs/",
    ]:
        assert expected in paths


def test_every_operation_has_a_description_and_examples(schema):
    for path, method, op in operations(schema):
        assert op.get("description", "").strip(), f"{method} {path} has no description"
        examples = []
        for response in op.get("responses", {}).values():
            for media in response.get("content", {}).values():
                examples += list(media.get("examples", {}))
        for media in op.get("requestBody", {}).get("content", {}).values():
            examples += list(media.get("examples", {}))
        is_export = "/export/" in path
        assert examples or is_export, f"{method} {path} has no example"


def test_export_columns_are_documented_in_the_schema(schema):
    annotations = schema["paths"]["/api/v1/studies/{id}/export/annotations/"]["get"]["description"]
    scores = schema["paths"]["/api/v1/studies/{id}/export/scores/"]["get"]["description"]
    assert all(f"`{c.name}`" in annotations for c in ANNOTATION_COLUMNS)
    assert all(f"`{c.name}`" in scores for c in SCORE_COLUMNS)


def test_a_client_that_follows_the_declared_token_scheme_gets_in(schema, client, researcher):
    """What the schema tells a client generator (issue 23 item 16: not an echo of the settings): the
    studies list asks for the token scheme, and a request built from its declaration (the header it
    names, ``Token <key>`` as it says) is let in; without it the answer is 401 with that scheme."""
    scheme = schema["components"]["securitySchemes"]["apiTokenAuth"]
    listing = schema["paths"]["/api/v1/studies/"]["get"]
    assert {"apiTokenAuth": []} in listing["security"] and scheme["in"] == "header"
    _, key = api_token_create(user=researcher, name="from-the-schema", by=None)

    allowed = client.get("/api/v1/studies/", headers={scheme["name"]: f"Token {key}"})
    refused = client.get("/api/v1/studies/")

    assert allowed.status_code == 200
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Token")


def test_docs_page_loads_its_assets_locally(client, researcher):
    client.force_login(researcher)
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    assert "/static/drf_spectacular_sidecar/" in html
    redoc = client.get("/api/redoc/").content.decode()
    assert "cdn.jsdelivr" not in redoc and "/static/drf_spectacular_sidecar/" in redoc
    assert client.get("/api/schema/").status_code == 200


def test_results_and_summary_examples_say_they_are_illustrative_and_use_results_json_keys(schema):
    """The examples look like released figures (458 units of gpt3) but are made up: each says so, and
    the results.json example uses only the top-level keys scoring documents (``scoring.services.score``)."""
    import re

    from scoring.services import score

    documented = set(re.findall(r"^- ``(\w+)``", score.__doc__, re.M))
    for path in ("/api/v1/studies/{id}/results/", "/api/v1/studies/{id}/summary/"):
        examples = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["examples"]
        assert examples, path
        for example in examples.values():
            assert "illustrative values, not the released data" in example["summary"], path
            if path.endswith("/results/"):
                assert set(example["value"]) <= documented, set(example["value"]) - documented
                assert "theils_u_utility_given_task_accuracy" in example["value"]
