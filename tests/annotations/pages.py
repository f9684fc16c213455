"""Helpers that walk the worker pages as a browser does (Django's test client)."""
from __future__ import annotations

import html
import re
from urllib.parse import urlencode

from django.test import Client

from annotations.models import Assignment
from annotations.platforms import handoff

FIELD = {name: re.compile(rf'name="{name}" value="([^"]*)"')
         for name in ("claim", "step", "shown", "nonce", "consent_sha256")}
# Text a worker page must show, never run; escaped, Jinja2 (the worker pages) writes an apostrophe
# as &#39;, Django's engine as &#x27;.
EVIL = "<script>alert('x')</script>"
EVIL_ESCAPED = ("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;", "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;")


def entry_url(study, **params) -> str:
    url = f"/w/s/{handoff.study_token(study.pk)}/"
    return f"{url}?{urlencode(params)}" if params else url


def task_of(url: str) -> Assignment:
    """The task a worker page's URL (``/w/t/<token>/...``) is for."""
    return Assignment.objects.get(token=url.rstrip("/").split("/")[-1])


def landing_form(client: Client, url: str, **extra) -> dict:
    """Open the landing page and fill its consent form as a browser sends it: the box ticked, the
    page's one-time nonce and the hash of the consent text it shows, and ``extra`` fields."""
    page = client.get(url)
    assert page.status_code == 200, page.content.decode()[:500]
    text = page.content.decode()
    return {"consent": "yes", **{name: html.unescape(FIELD[name].search(text).group(1))
                                 for name in ("nonce", "consent_sha256")}, **extra}


def landing_nonce(client: Client, url: str) -> str:
    """Open the landing page and read its one-time consent nonce."""
    return landing_form(client, url)["nonce"]


def consent(client: Client, url: str, **extra):
    """Load the landing page, tick the consent box and send the form (the response)."""
    return client.post(url, landing_form(client, url, **extra))


def start(client: Client, url: str, **extra) -> str:
    """Consent and return the task's URL."""
    response = consent(client, url, **extra)
    assert response.status_code == 302, response.content.decode()[:500]
    return response["Location"]


def form_fields(page: str) -> dict:
    return {name: FIELD[name].search(page).group(1) for name in ("claim", "step", "shown")}


def answer(client: Client, task: str, value: str = "yes", **extra) -> tuple[dict, object]:
    fields = form_fields(client.get(task).content.decode())
    response = client.post(task + "answer", {**fields, "answer": value, **extra})
    return fields, response


def complete_task(client: Client, task: str) -> None:
    for _ in range(50):
        page = client.get(task).content.decode()
        if 'name="claim"' not in page:
            break
        assert client.post(task + "answer", {**form_fields(page), "answer": "yes"}).status_code == 302
