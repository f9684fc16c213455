"""An open link's places are taken with tasks, not with consents: a consent that gets no task (no
work left, a task in progress elsewhere) takes no place, in the transaction that starts the task,
so a later worker is not turned away from a link whose places were never used."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, ConsentReceipt, OpenLink
from annotations.services.links import open_link_create
from annotations.services.platforms.access import OPERATOR
from annotations.services.release import assignment_return
from tests.annotations.factories import make_study
from tests.annotations.pages import consent, landing_form, start

pytestmark = pytest.mark.django_db


def used(link) -> int:
    return OpenLink.objects.get(pk=link.pk).n_participants


def test_refused_consents_take_no_place_on_an_open_link():
    # Two questions, one answer each: the first worker's task holds every unit.
    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2)
    link = open_link_create(study=study, user=OPERATOR, max_participants=3)
    url = f"/w/o/{link.token}/"
    holder = Client()
    start(holder, url)
    assert used(link) == 1

    other = Client()
    for _ in range(3):
        refused = consent(other, url)
        assert refused.status_code == 409 and "no work left" in refused.content.decode()
    assert used(link) == 1  # the refused consents took no place

    # A refused form sent again is decided afresh, and takes a place only with its task.
    form = landing_form(other, url)
    assert other.post(url, form).status_code == 409
    assert used(link) == 1
    assignment_return(assignment=Assignment.objects.get())  # the units are free again
    task = other.post(url, form)
    assert task.status_code == 302
    assert used(link) == 2
    assert other.post(url, form)["Location"] == task["Location"]  # the same form: the same task, no new place
    assert used(link) == 2
    assert ConsentReceipt.objects.filter(assignment__isnull=False).count() == 2

    # A fresh browser still finds a place (the units free again).
    assignment_return(assignment=Assignment.objects.get(status=Assignment.Status.ACTIVE))
    assert start(Client(), url)
    assert used(link) == 3


def test_a_full_open_link_still_refuses_and_keeps_no_one():
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    link = open_link_create(study=study, user=OPERATOR, max_participants=1)
    url = f"/w/o/{link.token}/"
    start(Client(), url)
    late = Client()
    form = landing_form(late, url)
    for _ in range(2):
        refused = late.post(url, form)
        assert refused.status_code == 403 and "full" in refused.content.decode()
    assert used(link) == 1 and Assignment.objects.count() == 1
