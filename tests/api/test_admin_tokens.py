"""A researcher creates a token in the admin, copies the key shown once, and downloads a study's
scored annotations into pandas filtered to one source (the issue's "done when")."""
from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from django.contrib.messages import get_messages
from rest_framework.test import APIClient

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
    grant(researcher, "studies.view_apitoken", "studies.change_apitoken")
    client.force_login(researcher)
    page = client.get("/admin/studies/apitoken/").content.decode()
    assert "olga" not in page


def test_there_is_one_token_admin_the_one_the_readme_uses():
    # Regression (issue 12): "Auth Token -> Tokens" (DRF's authtoken) beside "Studies -> API tokens";
    # only the second worked with the README's snippet.
    from django.conf import settings
    from django.contrib import admin

    assert [m for m in admin.site._registry if "token" in m._meta.model_name] == [ApiToken]
    assert "rest_framework.authtoken" not in settings.INSTALLED_APPS
