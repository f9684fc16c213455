"""Hostile input to the API answers 4xx with a message, never 500 (issue 10 item 10)."""
from __future__ import annotations

import pytest

from tests.api.conftest import WRITE_PERMISSIONS, grant

pytestmark = pytest.mark.django_db

JSON_WRITE_URLS = ["/api/v1/studies/", "/api/v1/score-runs/", "/api/v1/generation-jobs/"]


@pytest.mark.parametrize("url", JSON_WRITE_URLS)
@pytest.mark.parametrize("depth", [65])
def test_json_nested_too_deep_is_a_400_saying_so(client_for, researcher, url, depth):
    # One level over the bound; 5,000 levels (RecursionError, a 500 before) is in tests/test_no_500.py.
    grant(researcher, "studies.add_generationjob", *WRITE_PERMISSIONS)
    body = "[" * depth + "]" * depth
    response = client_for(researcher).post(url, body, content_type="application/json")
    assert response.status_code == 400
    assert "nested more than 64 levels" in response.json()["detail"]


def test_json_at_the_depth_limit_is_parsed(client_for, researcher):
    body = '{"study": ' + "[" * 63 + "]" * 63 + "}"
    response = client_for(researcher).post("/api/v1/score-runs/", body, content_type="application/json")
    assert response.status_code == 400 and "study" in response.json()  # a field error, not a parse error
