"""A place on an open link is held by those who joined through that link: a person who took part in
the study another way (another open link, the plain link) is a newcomer to this one, so a full
link refuses them and its count stays put. A worker who joined through the link and left comes
back through it to their place, without being counted twice."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, OpenLink
from annotations.services.links import open_link_create
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, landing_form, start

pytestmark = pytest.mark.django_db


def url(link) -> str:
    return f"/w/o/{link.token}/"


def places() -> list[tuple[int, int]]:
    return list(OpenLink.objects.order_by("pk").values_list("n_participants", "max_participants"))


def two_full_links():
    study = make_study(n_items=12, n_sources=1, units_per_task=2, quota=5)
    a = open_link_create(study=study, user=OPERATOR, max_participants=1)
    b = open_link_create(study=study, user=OPERATOR, max_participants=1)
    return study, a, b


def test_a_worker_of_another_open_link_is_refused_by_a_full_one():
    study, a, b = two_full_links()
    x = Client()
    x.post(start(x, url(a)) + "leave")  # x takes A's one place, and leaves
    y = Client()
    task = start(y, url(b))  # y takes B's one place
    complete_task(y, task)
    y.post(task + "submit")
    assert places() == [(1, 1), (1, 1)]
    tasks = Assignment.objects.count()

    refused = x.post(url(b), landing_form(x, url(b)))
    assert refused.status_code == 403 and "full" in refused.content.decode()
    assert places() == [(1, 1), (1, 1)]
    assert Assignment.objects.count() == tasks
    assert Assignment.objects.filter(completion_code=b.completion_code).count() == 1  # y's alone


def test_a_worker_of_the_plain_link_is_refused_by_a_full_open_link():
    study, a, _b = two_full_links()
    start(Client(), url(a))  # A's one place is taken
    z = Client()
    z.post(start(z, entry_url(study)) + "leave")  # z worked through the plain link, and left
    tasks = Assignment.objects.count()

    refused = z.post(url(a), landing_form(z, url(a)))
    assert refused.status_code == 403 and "full" in refused.content.decode()
    assert places() == [(1, 1), (0, 1)]
    assert Assignment.objects.count() == tasks
    assert Assignment.objects.filter(completion_code=a.completion_code).count() == 1


def test_a_worker_returning_through_the_same_full_link_gets_their_place_back():
    study, a, b = two_full_links()
    x = Client()
    first = start(x, url(a))
    x.post(first + "leave")
    start(Client(), url(b))  # B fills with someone else: x's place on A is theirs alone
    assert places() == [(1, 1), (1, 1)]

    again = x.post(url(a), landing_form(x, url(a)))
    assert again.status_code == 302 and again["Location"] != first
    assert places() == [(1, 1), (1, 1)]  # not counted twice
    assert Assignment.objects.filter(completion_code=a.completion_code).count() == 2

    # The full link still refuses a newcomer.
    late = Client()
    assert late.post(url(a), landing_form(late, url(a))).status_code == 403
    assert places() == [(1, 1), (1, 1)]


def test_a_task_started_before_the_link_was_recorded_keeps_its_place_on_that_link_only():
    study, a, b = two_full_links()
    x = Client()
    x.post(start(x, url(a)) + "leave")
    start(Client(), url(b))
    # As a task started before tasks recorded their open link: only the link's code tells.
    assert Assignment.objects.filter(open_link=a).update(open_link=None) == 1

    assert x.post(url(b), landing_form(x, url(b))).status_code == 403  # no place on B
    assert x.post(url(a), landing_form(x, url(a))).status_code == 302  # its place on A is still theirs
    assert places() == [(1, 1), (1, 1)]
