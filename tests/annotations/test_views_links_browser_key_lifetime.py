"""The browser key (cookie ``rl_b``) lives at least as long as every study cookie that relies on
it: whether a browser started the task its study cookie (``rl_w<study>``) names is read from the
key (``participants.task_started_in_browser``), and the study cookie is set again at every task
(``worker_pages.remember_task``), so the key is set again beside it (same value, same flags, a
lifetime no shorter). Set only at the first landing page, the key ran out first in a study longer
than its lifetime: an honest worker then became a new participant on their next single-person link
and answered the same questions again."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from annotations.models import Assignment, ParticipantLink
from annotations.services.links import links_generate
from annotations.services.platforms.access import OPERATOR
from annotations.worker_pages import COOKIE_MAX_AGE
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, landing_form, start
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db


class ExpiringBrowser(Client):
    """A test client that drops a cookie once its max-age has run out on the test clock, as a
    browser does (Django's client keeps every cookie forever)."""

    def __init__(self, clock, **kwargs):
        super().__init__(**kwargs)
        self.clock = clock
        self.expires = {}

    def kept(self) -> set[str]:
        """The names of the cookies this browser still has, now."""
        for name, when in list(self.expires.items()):
            if when <= self.clock.now:
                self.cookies.pop(name, None)
                del self.expires[name]
        return set(self.cookies.keys())

    def request(self, **request):
        self.kept()
        response = super().request(**request)
        for name, morsel in response.cookies.items():
            if morsel["max-age"] != "":
                self.expires[name] = self.clock.now + timedelta(seconds=int(morsel["max-age"]))
        return response


def link_url(link) -> str:
    return f"/w/l/{link.token}/"


def task_of(url: str) -> Assignment:
    return Assignment.objects.get(token=url.rstrip("/").rsplit("/", 1)[-1])


def finish(browser: Client, task: str) -> None:
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302


def test_each_task_sets_the_browser_key_again_beside_the_study_cookie():
    study = make_study(n_items=10, n_sources=1, units_per_task=2, quota=5)
    links_generate(study=study, user=OPERATOR, n=2)
    first, second = ParticipantLink.objects.order_by("pk")
    browser = Client()
    finish(browser, start(browser, link_url(first)))
    key = browser.cookies["rl_b"].value

    response = browser.post(link_url(second), landing_form(browser, link_url(second)))

    assert response.status_code == 302
    study_cookie, browser_cookie = response.cookies[f"rl_w{study.pk}"], response.cookies.get("rl_b")
    assert browser_cookie is not None, "the task's study cookie was set without the browser key"
    assert browser_cookie.value == key
    assert int(browser_cookie["max-age"]) >= int(study_cookie["max-age"]) == COOKIE_MAX_AGE
    for flag in ("httponly", "samesite", "secure", "path"):
        assert browser_cookie[flag] == study_cookie[flag], flag


def test_a_worker_in_a_study_longer_than_the_browser_keys_lifetime_stays_one_participant(monkeypatch):
    clock = clock_installed(monkeypatch)
    study = make_study(n_items=10, n_sources=1, units_per_task=2, quota=5)
    links_generate(study=study, user=OPERATOR, n=3)
    first, second, third = ParticipantLink.objects.order_by("pk")
    days = COOKIE_MAX_AGE // 86400
    alice = ExpiringBrowser(clock)
    task1 = start(alice, link_url(first))  # the browser key is made here, day 0
    finish(alice, task1)
    clock.advance(days=days - 10)
    task2 = start(alice, link_url(second))
    finish(alice, task2)
    clock.advance(days=days - 10)  # past the first landing page's key lifetime, within task 2's cookie's

    assert f"rl_w{study.pk}" in alice.kept()
    assert "rl_b" in alice.kept(), "the browser key ran out while the study cookie relying on it stayed"
    task3 = start(alice, link_url(third))

    third.refresh_from_db()
    alices = task_of(task1).participant_id
    assert task_of(task2).participant_id == third.participant_id == task_of(task3).participant_id == alices
    seen = [set(task_of(t).claims.values_list("question_key", flat=True)) for t in (task1, task2, task3)]
    assert not (seen[0] | seen[1]) & seen[2]
