"""A researcher creates a token in the admin, copies the key shown once, and downloads a study's
scored annotations into pandas filtered to one source (the issue's "done when")."""
from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from django.contrib.messages import get_messages
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import ApiToken
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db


def test_researcher_creates_a_token_in_the_admin_and_loads_scores_into_pandas(client, researcher, study_data):
    researcher.is_staff = True
    researcher.save()
    grant(researcher, "studies.add_apitoken", "studies.view_apitoken")
    client.force_login(researcher)
    response = client.post(
        "/admin/studies/apitoken/add/", {"name": "notebook", "read_only": "on", "expires_at_0": "", "expires_at_1": ""}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    token = ApiToken.objects.get()
    assert token.user == researcher and token.read_only
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request))
    key = re.search(r"<code>(rl_[\w-]+)</code>", shown).group(1)
    assert key.startswith(token.prefix) and key not in token.key_digest

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    gpt3 = study_data.sources[0]
    export = api.get(
        f"/api/v1/studies/{study_data.study.pk}/export/annotations/", {"file_format": "csv", "source": gpt3.name}
    )
    frame = pd.read_csv(io.BytesIO(b"".join(export.streaming_content)))
    assert set(frame["source_name"]) == {gpt3.name}
    assert frame.groupby("utility_label").size().to_dict() == {"useful": len(frame)}


def test_a_researcher_sees_only_their_own_tokens_in_the_admin(client, researcher, other_researcher, client_for):
    client_for(other_researcher)  # creates olga's token
    researcher.is_staff = True
    researcher.save()
    api_token_create(user=researcher, name="dana-notebook", by=None)
    grant(researcher, "studies.view_apitoken", "studies.change_apitoken")
    client.force_login(researcher)
    response = client.get("/admin/studies/apitoken/")
    page = response.content.decode()
    assert response.status_code == 200 and "dana-notebook" in page  # the list is shown, with their own token
    assert "olga" not in page


def test_there_is_one_token_admin_the_one_the_readme_uses():
    # Regression (issue 12): "Auth Token -> Tokens" (DRF's authtoken) beside "Studies -> API tokens";
    # only the second worked with the README's snippet.
    from django.conf import settings
    from django.contrib import admin

    assert [m for m in admin.site._registry if "token" in m._meta.model_name] == [ApiToken]
    assert "rest_framework.authtoken" not in settings.INSTALLED_APPS


# --- A token only narrows (issue 20, item 7) ----------------------------------------------------
@pytest.fixture
def bob(make_user):
    return make_user("bob", staff=True, perms=["studies.view_apitoken", "studies.change_apitoken",
                                               "studies.add_study"])


def _bobs_revoked_read_only_token(bob, make_user):
    """Bob's read-only token, revoked by a superuser on its admin change page."""
    from django.test import Client

    from studies.api.tokens import api_token_create

    token, key = api_token_create(user=bob, name="notebook", read_only=True, by=None)
    root = Client()
    root.force_login(make_user("root", superuser=True))
    response = root.post(f"/admin/studies/apitoken/{token.pk}/change/",
                         {"name": "notebook", "read_only": "on", "revoked": "on", "expires_at_0": "", "expires_at_1": ""})
    assert response.status_code == 302, response.content.decode()[:2000]
    token.refresh_from_db()
    assert token.revoked
    return token, key


def test_a_revoked_token_cannot_be_made_live_again_through_its_admin_change_page(client, bob, make_user):
    token, key = _bobs_revoked_read_only_token(bob, make_user)
    client.force_login(bob)
    response = client.post(f"/admin/studies/apitoken/{token.pk}/change/",
                           {"name": "notebook again", "expires_at_0": "", "expires_at_1": ""})  # boxes unticked
    assert response.status_code == 302, response.content.decode()[:2000]
    token.refresh_from_db()
    assert (token.name, token.revoked, token.read_only) == ("notebook again", True, True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/studies/").status_code == 401


def test_the_token_service_refuses_to_widen_a_token_naming_the_field(bob, make_user):
    from datetime import timedelta

    from django.core.exceptions import ValidationError
    from django.utils import timezone

    from studies.api.tokens import api_token_create, api_token_update

    token, _ = _bobs_revoked_read_only_token(bob, make_user)
    for change, field in [({"revoked": False}, "revoked"), ({"read_only": False}, "read_only")]:
        with pytest.raises(ValidationError) as refused:
            api_token_update(token=token, user=bob, **change)
        assert field in refused.value.message_dict
    token.refresh_from_db()
    assert token.revoked and token.read_only

    soon = timezone.now() + timedelta(days=1)
    live, _ = api_token_create(user=bob, name="script", read_only=False, expires_at=soon, by=None)
    for later in (soon + timedelta(days=30), None):
        with pytest.raises(ValidationError) as refused:
            api_token_update(token=live, user=bob, expires_at=later)
        assert "expires_at" in refused.value.message_dict
    narrowed = api_token_update(token=live, user=bob, read_only=True, expires_at=soon - timedelta(hours=1))
    assert narrowed.read_only and narrowed.expires_at == soon - timedelta(hours=1)
    with pytest.raises(ValidationError, match="not found or not yours"):
        api_token_update(token=live, user=make_user("olga", staff=True, perms=["studies.change_apitoken"]),
                         revoked=True)


def test_a_token_is_created_only_by_its_user_with_the_permission_or_a_superuser(researcher, other_researcher):
    """``api_token_create`` checks who acts itself, whatever page or script calls it: a token acts
    with all of its user's rights, so nobody but a superuser makes one for someone else."""
    from django.contrib.auth import get_user_model
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="may not create an API token for"):
        api_token_create(user=researcher, name="hers", by=other_researcher)  # another researcher
    with pytest.raises(ValidationError, match="may not create an API token for"):
        api_token_create(user=researcher, name="mine", by=researcher)  # no permission to add tokens
    assert not ApiToken.objects.filter(user=researcher).exists()
    grant(other_researcher, "studies.add_apitoken")
    other = get_user_model().objects.get(pk=other_researcher.pk)
    with pytest.raises(ValidationError, match="may not create an API token for"):
        api_token_create(user=researcher, name="hers", by=other)  # the permission is for her own tokens
    assert api_token_create(user=other, name="mine", by=other)[0].user == other
    root = get_user_model().objects.create_superuser(username="root", password="pw")
    assert api_token_create(user=researcher, name="given", by=root)[0].user == researcher
