"""The migration that adds ``ApiToken.password_hash`` keeps existing tokens working until their
user's next password change: each row is filled with its user's session auth hash as it reads now."""
from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

BEFORE = [("studies", "0016_study_task_minutes")]
AFTER = [("studies", "0017_apitoken_password_hash")]


@pytest.mark.django_db(transaction=True)
def test_existing_tokens_keep_working_until_the_next_password_change(migrate_to):
    old = migrate_to(BEFORE)
    User, Token = old.get_model("auth", "User"), old.get_model("studies", "ApiToken")
    dana = User.objects.create(username="dana", password="pbkdf2_sha256$1$salt$hash")
    key = "rl_" + "k" * 43
    Token.objects.create(user=dana, name="nb", prefix=key[:10], key_digest=hashlib.sha256(key.encode()).hexdigest(), read_only=True)

    migrate_to(AFTER)
    user = get_user_model().objects.get(username="dana")
    assert user.api_tokens.get().password_hash == user.get_session_auth_hash()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/studies/").status_code == 200
    user.set_password("a-new-Passw0rd")
    user.save()
    assert api.get("/api/v1/studies/").status_code == 401
