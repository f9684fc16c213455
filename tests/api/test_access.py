"""Who may reach what: 401 for anonymous requests, 404 for studies one cannot see, 403 for
read-only tokens on writes and for missing permissions."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import ApiToken

pytestmark = pytest.mark.django_db

LIST_URLS = [
    "/api/v1/datasets/", "/api/v1/items/", "/api/v1/rationale-sources/", "/api/v1/rationales/",
    "/api/v1/generalization-questions/", "/api/v1/studies/", "/api/v1/imports/", "/api/v1/assignments/",
    "/api/v1/annotations/", "/api/v1/scores/", "/api/v1/score-runs/",
]


def study_urls(pk: int) -> list[str]:
    return [
        f"/api/v1/studies/{pk}/", f"/api/v1/studies/{pk}/results/", f"/api/v1/studies/{pk}/summary/",
        f"/api/v1/studies/{pk}/export/annotations/", f"/api/v1/studies/{pk}/export/scores/?file_format=parquet",
    ]


@pytest.mark.parametrize("url", LIST_URLS)
def test_anonymous_requests_get_401_on_every_list(anon, url):
    response = anon.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")


def test_anonymous_requests_get_401_on_study_endpoints_and_writes(anon, study_data):
    for url in study_urls(study_data.study.pk):
        assert anon.get(url).status_code == 401, url
    assert anon.post("/api/v1/studies/", {"name": "x"}, format="json").status_code == 401
    assert anon.post("/api/v1/score-runs/", {"study": study_data.study.pk}, format="json").status_code == 401


def test_a_crowdworker_session_reaches_nothing(study_data):
    # A worker doing a task has a session but is no Django user.
    client = APIClient()
    session = client.session
    session["participant_id"] = study_data.participants[0].pk
    session.save()
    assert client.get("/api/v1/annotations/").status_code == 401


def test_researcher_cannot_read_another_researchers_study(client_for, study_data, other_study_data):
    dana = client_for(study_data.study.owner)
    other_pk = other_study_data.study.pk
    for url in study_urls(other_pk):
        response = dana.get(url)
        assert response.status_code == 404, url
    listed = [s["id"] for s in dana.get("/api/v1/studies/").json()["results"]]
    assert listed == [study_data.study.pk]
    # Nor its answers, assignments or scores through the flat lists.
    for url in ("/api/v1/annotations/", "/api/v1/assignments/", "/api/v1/scores/", "/api/v1/score-runs/"):
        studies = {row["study"] for row in dana.get(url, {"page_size": 1000}).json()["results"]}
        assert studies == {study_data.study.pk}, url
    other_annotation = other_study_data.annotations[0].pk
    assert dana.get(f"/api/v1/annotations/{other_annotation}/").status_code == 404
    assert dana.get(f"/api/v1/annotations/?study={other_pk}").json()["results"] == []


def test_a_shared_study_is_visible_to_the_researcher_it_is_shared_with(client_for, study_data, other_study_data):
    other_study_data.study.shared_with.add(study_data.study.owner)
    dana = client_for(study_data.study.owner)
    assert dana.get(f"/api/v1/studies/{other_study_data.study.pk}/").status_code == 200
    assert dana.get(f"/api/v1/studies/{other_study_data.study.pk}/export/scores/").status_code == 200


def test_staff_see_every_study(client_for, staff_plain, study_data, other_study_data):
    ids = {s["id"] for s in client_for(staff_plain).get("/api/v1/studies/").json()["results"]}
    assert ids == {study_data.study.pk, other_study_data.study.pk}


def test_read_only_token_reads_but_is_refused_on_every_write(client_for, researcher, study_data):
    client = client_for(researcher, read_only=True)
    assert client.get("/api/v1/studies/").status_code == 200
    writes = [
        ("/api/v1/studies/", {"name": "new", "dataset": study_data.study.dataset.name}),
        ("/api/v1/score-runs/", {"study": study_data.study.pk}),
        ("/api/v1/imports/", {"kind": "strategyqa"}),
    ]
    for url, body in writes:
        response = client.post(url, body)
        assert response.status_code == 403, url
        assert "read-only" in response.json()["detail"]


def test_write_without_the_model_permission_is_403_naming_it(client_for, make_user, study_data):
    study_data.study.shared_with.add(user := make_user("viewer"))
    client = client_for(user)
    response = client.post("/api/v1/score-runs/", {"study": study_data.study.pk}, format="json")
    assert response.status_code == 403
    assert "scoring.add_scorerun" in response.json()["detail"]


@pytest.mark.parametrize("change", ["revoked", "expired", "inactive", "unknown"])
def test_unusable_tokens_get_401(researcher, change):
    token, key = api_token_create(user=researcher, name="t")
    if change == "revoked":
        ApiToken.objects.filter(pk=token.pk).update(revoked=True)
    elif change == "expired":
        ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif change == "inactive":
        researcher.is_active = False
        researcher.save()
    else:
        key = key[:-2] + "xx"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/studies/").status_code == 401


def test_token_is_stored_only_as_a_digest_and_records_its_last_use(client_for, researcher):
    token, key = api_token_create(user=researcher, name="notebook")
    assert key not in (token.key_digest, token.prefix) and key.startswith(token.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/datasets/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_drf_tokens_and_sessions_work_too(researcher, study_data):
    drf = APIClient()
    drf.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=researcher).key}")
    assert drf.get(f"/api/v1/studies/{study_data.study.pk}/").status_code == 200
    session = APIClient()
    session.force_login(researcher)
    assert session.get(f"/api/v1/studies/{study_data.study.pk}/").status_code == 200


def test_writes_are_throttled(client_for, researcher, study_data, settings):
    settings.RL_API_THROTTLE_RATES = {"api_write": "2/min", "api_export": "30/min"}
    client = client_for(researcher)
    codes = [client.post("/api/v1/studies/", {}, format="json").status_code for _ in range(3)]
    assert codes == [400, 400, 429]
    # Reads are not throttled.
    assert all(client.get("/api/v1/studies/").status_code == 200 for _ in range(5))
