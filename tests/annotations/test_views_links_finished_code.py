"""A finished single-person link shows its completion code only in the browser that did the task
(``services.entry.link_task_done_in_browser``), also once that browser went on to another link of
its participant, and never in a browser that was only handed that other link's task in progress
(the link is the credential of its task in progress, from any browser)."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import ParticipantLink
from annotations.services.links import links_generate
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, start

pytestmark = pytest.mark.django_db


def link_url(link) -> str:
    return f"/w/l/{link.token}/"


@pytest.fixture
def alice():
    """Alice finishes her first link's task and starts her second link's in the same browser."""
    study = make_study(n_items=10, n_sources=1, units_per_task=2, quota=5)
    links_generate(study=study, user=OPERATOR, n=2)
    first, second = ParticipantLink.objects.order_by("pk")
    browser = Client()
    task1 = start(browser, link_url(first))
    complete_task(browser, task1)
    assert browser.post(task1 + "submit").status_code == 302
    task2 = start(browser, link_url(second))
    return browser, first, second, task1, task2


def test_a_browser_handed_the_second_links_task_does_not_see_the_first_links_code(alice):
    _browser, first, second, _task1, task2 = alice
    bob = Client()
    assert bob.get(link_url(first)).status_code == 403
    assert bob.get(link_url(second))["Location"] == task2  # the link is its task's credential

    again = bob.get(link_url(first))

    assert again.status_code == 403, again.get("Location")
    assert "already used" in again.content.decode() and first.completion_code not in again.content.decode()


def test_the_browser_that_did_it_sees_its_code_also_after_starting_the_second_link(alice):
    browser, first, second, task1, task2 = alice
    assert browser.get(link_url(first))["Location"] == task1
    assert first.completion_code in browser.get(task1).content.decode()
    bob = Client()
    bob.get(link_url(second))  # another browser handed the second task changes nothing for Alice
    assert browser.get(link_url(first))["Location"] == task1
    assert browser.get(link_url(second))["Location"] == task2
