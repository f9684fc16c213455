"""The worker pages' Jinja2 environment (lab/jinja2.py): its url() and its once-masked CSRF field."""
from __future__ import annotations

import re

import pytest
from django.middleware.csrf import _unmask_cipher_token
from django.test import Client
from django.urls import reverse, set_script_prefix

from lab.jinja2 import url
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url, start

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def test_url_is_reverse_and_follows_the_script_prefix():
    assert url("annotations:answer", "tok") == reverse("annotations:answer", args=["tok"])
    assert url("annotations:answer", token="tok") == reverse("annotations:answer", kwargs={"token": "tok"})
    try:
        set_script_prefix("/lab/")  # a deployment under a sub-path: the kept address must not be reused
        assert url("annotations:answer", "tok") == reverse("annotations:answer", args=["tok"])
        assert url("annotations:answer", "tok").startswith("/lab/")
    finally:
        set_script_prefix("/")
    assert not url("annotations:answer", "tok").startswith("/lab/")


@pytest.mark.django_db
def test_a_page_with_two_forms_masks_the_token_once_and_each_response_anew():
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    client = Client(enforce_csrf_checks=True)
    page = client.get(entry_url(study)).content.decode()
    task = start(client, entry_url(study), csrfmiddlewaretoken=CSRF.search(page).group(1))
    first = client.get(task).content.decode()
    tokens = CSRF.findall(first)
    assert len(tokens) == 2 and tokens[0] == tokens[1]  # the answer form and "Return this task"
    again = CSRF.findall(client.get(task).content.decode())
    assert again[0] != tokens[0]  # a new mask per response (BREACH)
    assert _unmask_cipher_token(again[0]) == _unmask_cipher_token(tokens[0])  # the same secret
    # The field is accepted: the task is handed back with it.
    response = client.post(task + "leave", {"csrfmiddlewaretoken": tokens[1]})
    assert response.status_code == 302
