"""A browser handed another participant's task in progress through its single-person link (the
link is that task's credential) is not that participant: the next unused link it opens is
redeemed as the link's own participant (``participants.participant_of_browser``: only a task the
browser started itself proves who it is, ``participants.task_started_in_browser``), so it never
gets the first link's completion code that way. The browser that did start the task goes on as
its participant."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, ParticipantLink
from annotations.services.links import links_generate, open_link_create
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, start

pytestmark = pytest.mark.django_db


def link_url(link) -> str:
    return f"/w/l/{link.token}/"


def task_of(url: str) -> Assignment:
    return Assignment.objects.get(token=url.rstrip("/").rsplit("/", 1)[-1])


@pytest.fixture
def handed():
    """Alice finishes her first link's task and starts her second link's; Bob is handed that
    second link and finishes its task in his browser."""
    study = make_study(n_items=10, n_sources=1, units_per_task=2, quota=5)
    links_generate(study=study, user=OPERATOR, n=3)
    first, second, bobs_own = ParticipantLink.objects.order_by("pk")
    alice = Client()
    task1 = start(alice, link_url(first))
    complete_task(alice, task1)
    assert alice.post(task1 + "submit").status_code == 302
    task2 = start(alice, link_url(second))
    bob = Client()
    assert bob.get(link_url(second))["Location"] == task2  # handed Alice's task in progress
    complete_task(bob, task2)
    assert bob.post(task2 + "submit").status_code == 302
    assert bob.get(link_url(first)).status_code == 403
    return alice, bob, first, second, bobs_own, task1, task2


def test_a_handed_browser_opening_an_unused_link_is_not_the_handed_tasks_participant(handed):
    _alice, bob, first, _second, bobs_own, task1, _task2 = handed

    task3 = start(bob, link_url(bobs_own))

    bobs_own.refresh_from_db()
    alices = task_of(task1).participant_id
    assert bobs_own.participant_id is not None and bobs_own.participant_id != alices
    assert task_of(task3).participant_id == bobs_own.participant_id
    again = bob.get(link_url(first))
    assert again.status_code == 403, again.get("Location")
    assert first.completion_code not in again.content.decode()


def test_the_browser_that_started_the_task_is_still_its_participant_on_its_next_link(handed):
    alice, _bob, first, _second, bobs_own, task1, task2 = handed

    task3 = start(alice, link_url(bobs_own))  # an unused link opened in Alice's own browser

    bobs_own.refresh_from_db()
    assert bobs_own.participant_id == task_of(task1).participant_id == task_of(task3).participant_id
    assert alice.get(link_url(first))["Location"] == task1


def test_a_handed_browser_on_an_open_link_of_the_study_is_not_the_handed_tasks_participant(handed):
    _alice, bob, first, _second, _bobs_own, task1, _task2 = handed
    shared = open_link_create(study=first.study, user=OPERATOR)

    task3 = start(bob, f"/w/o/{shared.token}/")

    assert task_of(task3).participant_id != task_of(task1).participant_id
    again = bob.get(link_url(first))
    assert again.status_code == 403, again.get("Location")
