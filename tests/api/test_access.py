"""Who may reach what: 401 for anonymous requests, 404 for studies one cannot see, 403 for
read-only tokens on writes and for missing permissions."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create, api_token_refusal
from studies.models import ApiToken
from tests.api.conftest import grant

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


def test_staff_without_rights_see_no_study(client_for, staff_plain, study_data, other_study_data):
    # Regression (issue 10 item 9): being staff used to show every study and its export.
    client = client_for(staff_plain)
    assert client.get("/api/v1/studies/").json()["results"] == []
    for url in study_urls(study_data.study.pk):
        assert client.get(url).status_code == 404, url
    for url in LIST_URLS:
        assert client.get(url).json()["results"] == [], url


def test_superusers_see_every_study(client_for, make_user, study_data, other_study_data):
    root = make_user("root", superuser=True)
    ids = {s["id"] for s in client_for(root).get("/api/v1/studies/").json()["results"]}
    assert ids == {study_data.study.pk, other_study_data.study.pk}


def test_reference_lists_hold_only_what_the_users_studies_use(client_for, study_data, other_study_data):
    # Regression: items/?study=<another's study> listed that study's items.
    dana = client_for(study_data.study.owner)
    other_pk = other_study_data.study.pk
    for url in ("/api/v1/items/", "/api/v1/rationales/", "/api/v1/rationale-sources/",
                "/api/v1/generalization-questions/"):
        assert dana.get(url, {"study": other_pk}).json()["results"] == [], url
    items = {row["id"] for row in dana.get("/api/v1/items/", {"page_size": 1000}).json()["results"]}
    assert items == {i.pk for i in study_data.items}
    sources = {row["id"] for row in dana.get("/api/v1/rationale-sources/").json()["results"]}
    assert sources == {s.pk for s in study_data.sources}
    rationales = dana.get("/api/v1/rationales/", {"page_size": 1000}).json()["results"]
    assert {(r["item"], r["source"]) for r in rationales} == {
        (i.pk, s.pk) for i in study_data.items for s in study_data.sources
    }
    assert dana.get(f"/api/v1/items/{other_study_data.items[0].pk}/").status_code == 404


def test_the_view_permission_opens_the_item_library(client_for, make_user, study_data, other_study_data):
    librarian = make_user("librarian", perms=["studies.view_item"])
    client = client_for(librarian)
    listed = {row["id"] for row in client.get("/api/v1/items/", {"page_size": 1000}).json()["results"]}
    assert listed == {i.pk for i in study_data.items + other_study_data.items}
    # ...but not which items another researcher's study holds.
    assert client.get("/api/v1/items/", {"study": study_data.study.pk}).json()["results"] == []


def test_a_study_design_names_only_visible_datasets_and_sources(client_for, researcher, other_study_data):
    response = client_for(researcher).post("/api/v1/studies/", {
        "name": "borrowed", "dataset": other_study_data.study.dataset.name,
        "sources": [other_study_data.sources[0].name],
    }, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"dataset", "sources"}


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
    token, key = api_token_create(user=researcher, name="t", by=None)
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
    token, key = api_token_create(user=researcher, name="notebook", by=None)
    assert key not in (token.key_digest, token.prefix) and key.startswith(token.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/datasets/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_sessions_work_and_only_api_tokens_are_tokens(researcher, study_data):
    session = APIClient()
    session.force_login(researcher)
    assert session.get(f"/api/v1/studies/{study_data.study.pk}/").status_code == 200
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION="Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b")
    assert other.get("/api/v1/studies/").status_code == 401


def test_the_api_root_accepts_an_api_token(client_for, researcher):
    # Regression (issue 12): GET /api/v1/ answered 401 "Invalid token" to a valid rl_ token.
    response = client_for(researcher, read_only=True).get("/api/v1/")
    assert response.status_code == 200
    assert "studies" in response.json()


def test_every_api_view_uses_the_default_access_classes():
    from django.conf import settings
    from rest_framework.settings import api_settings

    from config.api_urls import router

    assert [c.__module__ + "." + c.__name__ for c in api_settings.DEFAULT_PERMISSION_CLASSES] == (
        settings.REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]
    )
    for prefix, viewset, _ in router.registry:
        assert viewset.permission_classes == api_settings.DEFAULT_PERMISSION_CLASSES, prefix
        assert viewset.authentication_classes == api_settings.DEFAULT_AUTHENTICATION_CLASSES, prefix


def test_a_write_the_view_names_no_permission_for_is_refused(client_for, make_user, study_data):
    root = make_user("root", superuser=True)
    client = client_for(root)
    for url in ("/api/v1/items/", f"/api/v1/studies/{study_data.study.pk}/"):
        assert client.post(url, {}, format="json").status_code in (403, 405), url
    response = client.delete(f"/api/v1/studies/{study_data.study.pk}/")
    assert response.status_code in (403, 405)


def test_writes_are_throttled(client_for, researcher, study_data, settings):
    settings.RL_API_THROTTLE_RATES = {"api_write": "2/min", "api_export": "30/min"}
    client = client_for(researcher)
    codes = [client.post("/api/v1/studies/", {}, format="json").status_code for _ in range(3)]
    assert codes == [400, 400, 429]
    # Reads are not throttled.
    assert all(client.get("/api/v1/studies/").status_code == 200 for _ in range(5))


# --- A password change ends the user's tokens, as it ends their sessions ----------------------------
def _token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_a_password_reset_on_the_admin_page_ends_the_users_tokens_and_their_list_says_why(researcher, make_user):
    # Given a token made with the account's password, and a session of the same account
    grant(researcher, "studies.add_apitoken")
    token, key = api_token_create(user=researcher, name="nb", read_only=False, by=researcher)
    session = APIClient()
    session.force_login(researcher)
    assert _token_client(key).get("/api/v1/studies/").status_code == 200
    # When the operator resets the password on the admin's password page
    root = Client()
    root.force_login(make_user("root", superuser=True))
    new = "a-new-Passw0rd-for-dana"
    response = root.post(f"/admin/auth/user/{researcher.pk}/password/",
                         {"password1": new, "password2": new, "usable_password": "true"})
    assert response.status_code == 302, response.content.decode()[:2000]
    # Then the session and the token both stop, and the token list says why
    assert session.get("/api/v1/studies/").status_code in (401, 403)
    assert _token_client(key).get("/api/v1/studies/").status_code == 401
    listing = root.get("/admin/studies/apitoken/").content.decode()
    assert "nb" in listing and "ended by a password change" in listing
    page = root.get(f"/admin/studies/apitoken/{token.pk}/change/").content.decode()
    assert "ended by a password change" in page


def test_set_password_and_save_ends_the_token(researcher):
    _, key = api_token_create(user=researcher, name="nb", by=None)
    researcher.set_password("another-Passw0rd")
    researcher.save()
    response = _token_client(key).get("/api/v1/studies/")
    assert response.status_code == 401
    assert "ended by a change of its user's password" in response.json()["detail"]


def test_a_token_made_after_the_password_change_works(researcher):
    api_token_create(user=researcher, name="before", by=None)
    researcher.set_password("another-Passw0rd")
    researcher.save()
    token, key = api_token_create(user=researcher, name="after", by=None)
    assert _token_client(key).get("/api/v1/studies/").status_code == 200
    assert api_token_refusal(token=token) is None


def test_a_token_keeps_working_while_the_password_is_unchanged(researcher):
    _, key = api_token_create(user=researcher, name="nb", by=None)
    researcher.first_name = "Dana"  # any other change to the account, and a login, leave it alone
    researcher.last_login = timezone.now()
    researcher.save()
    assert _token_client(key).get("/api/v1/studies/").status_code == 200


class Iterations2Hasher(PBKDF2PasswordHasher):
    iterations = 2


class Iterations3Hasher(PBKDF2PasswordHasher):  # a later Django's default: more iterations
    iterations = 3


ITERATIONS_2 = f"{__name__}.Iterations2Hasher"
ITERATIONS_3 = f"{__name__}.Iterations3Hasher"


def test_a_hash_upgrade_on_login_leaves_the_users_tokens_working(make_user, settings):
    # Given a token of an account whose password was hashed with fewer iterations than now preferred
    settings.PASSWORD_HASHERS = [ITERATIONS_2]
    dana = make_user("dana", staff=True)
    token, key = api_token_create(user=dana, name="nb", by=None)
    settings.PASSWORD_HASHERS = [ITERATIONS_3, ITERATIONS_2]  # as after a Django upgrade
    # When she logs in with the same password, and Django rewrites its hash with the new iterations
    response = Client().post("/admin/login/", {"username": "dana", "password": "pw-dana"})
    assert response.status_code == 302
    dana.refresh_from_db()
    assert dana.password.startswith("pbkdf2_sha256$3$")
    # Then her token still works: her password did not change
    assert _token_client(key).get("/api/v1/studies/").status_code == 200
    token.refresh_from_db()
    assert api_token_refusal(token=token) is None


def test_changing_ones_own_password_on_the_admin_page_ends_ones_tokens(make_user):
    dana = make_user("dana", staff=True)
    _, key = api_token_create(user=dana, name="nb", by=None)
    browser = Client()
    browser.force_login(dana)
    new = "a-new-Passw0rd-for-dana"
    response = browser.post("/admin/password_change/",
                            {"old_password": "pw-dana", "new_password1": new, "new_password2": new})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert _token_client(key).get("/api/v1/studies/").status_code == 401


def test_making_the_password_unusable_on_the_admin_page_ends_the_users_tokens(researcher, make_user):
    # Django ends the user's sessions then too (their session auth hash changes); so the tokens end.
    token, key = api_token_create(user=researcher, name="nb", by=None)
    root = Client()
    root.force_login(make_user("root", superuser=True))
    response = root.post(f"/admin/auth/user/{researcher.pk}/password/", {"usable_password": "false", "unset-password": "1"})
    assert response.status_code == 302, response.content.decode()[:2000]
    researcher.refresh_from_db()
    assert not researcher.has_usable_password()
    assert _token_client(key).get("/api/v1/studies/").status_code == 401
    token.refresh_from_db()
    assert api_token_refusal(token=token) == "ended by a password change"


def test_a_token_of_an_account_without_a_usable_password_survives_its_other_changes(researcher):
    # An account that signs in elsewhere (no usable password) is given a token by the operator.
    researcher.set_unusable_password()
    researcher.save()
    _, key = api_token_create(user=researcher, name="nb", by=None)
    researcher.first_name = "Dana"
    researcher.save()
    researcher.last_login = timezone.now()
    researcher.save(update_fields=["last_login"])
    assert _token_client(key).get("/api/v1/studies/").status_code == 200
