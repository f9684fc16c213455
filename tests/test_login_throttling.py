"""Failed logins are throttled per user and address (issue 20 item 10): 60 wrong admin passwords
in 36 s, then the right one, used to log in. django-axes counts the failures of each (username,
client address) pair; at ``AXES_FAILURE_LIMIT`` the pair is refused, the right password included,
until the cool-off ends or an operator resets it; the lockout is logged; API tokens are not
logins and are unaffected."""
from __future__ import annotations

import logging

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
PASSWORD = "the-right-pw-1"


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password=PASSWORD, is_staff=True)


def login(client: Client, password: str, *, username: str = "alice", **extra):
    return client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"}, **extra)


def logged_in(client: Client) -> bool:
    return client.get("/admin/").status_code == 200


def fail(client: Client, times: int, **extra) -> None:
    for n in range(times):
        response = login(client, f"wrong-{n}", **extra)
        assert response.status_code in (200, 429), response.status_code


def test_after_the_limit_the_right_password_is_refused_and_the_lockout_is_logged(alice, caplog):
    client = Client()
    with caplog.at_level(logging.WARNING, logger="axes"):
        fail(client, settings.AXES_FAILURE_LIMIT)
    response = login(client, PASSWORD)
    assert response.status_code == 429
    assert "too many" in response.content.decode().lower()
    assert not logged_in(client)
    lockouts = [r for r in caplog.records if "Locking out" in r.getMessage()]
    assert lockouts, [r.getMessage() for r in caplog.records]
    assert all('username: "alice"' in r.getMessage() and PASSWORD not in r.getMessage() and r.levelno == logging.WARNING for r in lockouts)


def test_fewer_failures_than_the_limit_still_let_the_right_password_in_and_reset_the_count(alice):
    client = Client()
    fail(client, settings.AXES_FAILURE_LIMIT - 1)
    assert login(client, PASSWORD).status_code == 302 and logged_in(client)
    client.logout()
    fail(client, settings.AXES_FAILURE_LIMIT - 1)  # counted again from zero after the success
    assert login(client, PASSWORD).status_code == 302


def test_the_lockout_is_per_user_and_address(alice):
    get_user_model().objects.create_user("bob", password=PASSWORD, is_staff=True)
    fail(Client(), settings.AXES_FAILURE_LIMIT, REMOTE_ADDR="203.0.113.9")
    # alice from another address, and bob from the attacker's address, still log in
    assert login(Client(), PASSWORD, REMOTE_ADDR="198.51.100.4").status_code == 302
    assert login(Client(), PASSWORD, username="bob", REMOTE_ADDR="203.0.113.9").status_code == 302
    assert login(Client(), PASSWORD, REMOTE_ADDR="203.0.113.9").status_code == 429


def test_a_forged_forwarded_for_header_does_not_change_the_address_counted(alice):
    for n in range(settings.AXES_FAILURE_LIMIT):
        login(Client(), "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert login(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.200").status_code == 429


def test_behind_a_trusted_proxy_the_forwarded_address_is_counted(alice, settings):
    settings.RL_TRUSTED_PROXIES = 1
    fail(Client(), settings.AXES_FAILURE_LIMIT, HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9", REMOTE_ADDR="10.0.0.2")
    # another client behind the same proxy is not locked out; the attacker is, whatever it forges
    assert login(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.4", REMOTE_ADDR="10.0.0.2").status_code == 302
    assert login(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="1.1.1.1, 203.0.113.9",
                 REMOTE_ADDR="10.0.0.2").status_code == 429


def test_an_operator_unlocks_with_axes_reset_username(alice):
    client = Client()
    fail(client, settings.AXES_FAILURE_LIMIT)
    assert login(client, PASSWORD).status_code == 429
    call_command("axes_reset_username", "alice")
    assert login(client, PASSWORD).status_code == 302 and logged_in(client)


def test_api_tokens_are_not_logins_and_work_while_the_user_is_locked_out(alice):
    fail(Client(), settings.AXES_FAILURE_LIMIT)
    _, key = api_token_create(user=alice, name="t", read_only=True, by=None)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/studies/").status_code == 200
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):  # bad tokens are 401s, never lockouts
        bad = APIClient()
        bad.credentials(HTTP_AUTHORIZATION="Token rl_not-a-key")
        assert bad.get("/api/v1/studies/").status_code in (401, 403)
    assert api.get("/api/v1/studies/").status_code == 200
