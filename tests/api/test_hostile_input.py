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


SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() refuses it
LONG_DIGITS = "9" * 5000  # str.isdigit() says yes, int() refuses over 4,300 digits


@pytest.mark.parametrize("url", [
    "/api/v1/studies/{pk}/cost/?max_assignments_per_hit=" + SUPERSCRIPT_TWO,
    "/api/v1/studies/{pk}/cost/?max_assignments_per_hit=" + LONG_DIGITS,
    "/api/v1/rationales/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/rationales/?source=" + LONG_DIGITS,
    "/api/v1/generation-jobs/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/scores/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/studies/?source=" + SUPERSCRIPT_TWO,
    "/api/v1/annotations/?source=" + LONG_DIGITS,
])
def test_a_digit_int_refuses_is_an_answer_not_a_500(client_for, study_data, url):
    """An id given as text is one only in ASCII digits and within a key's size (``lab.ids.parse_id``):
    ``²`` or 5,000 nines is no id (a name, or a 400 naming the parameter), never a 500."""
    client = client_for(study_data.study.owner)
    client.raise_request_exception = False
    response = client.get(url.format(pk=study_data.study.pk))
    assert response.status_code in (200, 400), response.content[:300]
    if "max_assignments_per_hit" in url:
        assert response.status_code == 400 and "max_assignments_per_hit" in response.json()


@pytest.mark.parametrize("body, field", [
    ({"kind": "rationales", "source": SUPERSCRIPT_TWO, "dataset": 1}, "source"),
    ({"kind": "rationales", "source": LONG_DIGITS, "dataset": 1}, "source"),
    ({"kind": "rationales", "source": "x", "dataset": SUPERSCRIPT_TWO}, "dataset"),
])
def test_a_job_naming_a_source_or_dataset_by_an_odd_digit_is_a_400_naming_it(client_for, study_data, body, field):
    owner = grant(study_data.study.owner, "studies.add_generationjob")
    client = client_for(owner)
    client.raise_request_exception = False
    response = client.post("/api/v1/generation-jobs/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content[:300]


def _cursor(position: str) -> str:
    """A cursor as DRF encodes one (base64 of its query string), holding a made-up position."""
    import base64
    from urllib.parse import quote, urlencode

    return quote(base64.b64encode(urlencode({"p": position}).encode()).decode())


@pytest.mark.parametrize("url", ["/api/v1/annotations/", "/api/v1/assignments/", "/api/v1/studies/",
                                 "/api/v1/items/", "/api/v1/scores/", "/api/v1/score-runs/"])
@pytest.mark.parametrize("position", ["abc", "2026-13-45"])
def test_a_made_up_cursor_is_a_404_saying_invalid_cursor(client_for, researcher, study_data, url, position):
    response = client_for(researcher).get(f"{url}?cursor={_cursor(position)}")
    assert response.status_code == 404, response.content[:300]
    assert response.json()["detail"] == "Invalid cursor"


def test_the_score_runs_form_lists_no_study_of_another_researcher(researcher, other_study_data):
    """The browsable API draws a form from the list's serializer: a writable ``study`` field listed
    every study on the server (id and name), whoever could start a run."""
    from django.test import Client

    grant(researcher, "scoring.add_scorerun")
    researcher.is_staff = True
    researcher.save()
    client = Client()
    client.force_login(researcher)
    page = client.get("/api/v1/score-runs/?format=api").content.decode()
    assert other_study_data.study.name not in page
    assert f'value="{other_study_data.study.pk}"' not in page
