"""A task the researcher ended (a block: ``worker_block`` ends the worker's tasks in progress in the
studies it covers) has its own page: it says the researcher ended it and asks the worker to return
it on their platform, where before it said "You left this task" and a submit was refused as
"already returned". A task the worker gave back themselves still says they left it."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import Assignment, Claim
from annotations.services.platforms.blocks import worker_block
from annotations.services.release import assignment_return
from tests.clock import clock_installed
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _page(client: Client, task: Assignment) -> str:
    response = client.get(reverse("annotations:assignment", args=[task.token]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_task_ended_by_a_block_says_the_researcher_ended_it_not_that_the_worker_left():
    alice, _ = staff_client("alice")
    study = open_utility_study(name="alice-1", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    task = work(study, "pblocked1", steps=1, submit=False)  # mid-task
    worker_block(user=alice, study=study, participant=task.participant, reason="Copied answers.")
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.RETURNED
    worker = Client()

    page = _page(worker, task)
    assert "The researcher ended this task" in page and "return it on your platform" in page
    assert "You left this task" not in page

    refused = worker.post(reverse("annotations:submit", args=[task.token])).content.decode()
    assert "The researcher ended this task" in refused and "already returned" not in refused


def test_a_task_the_worker_gave_back_still_says_they_left_it_after_a_block():
    alice, _ = staff_client("alice")
    study = open_utility_study(name="alice-2", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    task = work(study, "pleaver01", steps=1, submit=False)
    assignment_return(assignment=task)
    worker_block(user=alice, study=study, participant=task.participant, reason="Copied answers.")

    page = _page(Client(), task)
    assert "You left this task" in page and "The researcher ended this task" not in page


def test_a_block_after_the_deadline_ends_the_task_expired_as_the_sweep_would(monkeypatch):
    """The task had ended at its deadline (its page and the progress page count it expired): the
    block does not move it among the tasks the researcher ended, and its page still says it expired."""
    alice, _ = staff_client("alice")
    study = open_utility_study(name="alice-3", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    task = work(study, "plate0001", steps=1, submit=False)
    clock = clock_installed(monkeypatch)
    clock.now = Assignment.objects.get(pk=task.pk).expires_at + timedelta(seconds=1)

    worker_block(user=alice, study=study, participant=task.participant, reason="Copied answers.")

    ended = Assignment.objects.get(pk=task.pk)
    assert (ended.status, ended.ended_by_researcher) == (Assignment.Status.EXPIRED, False)
    assert not Claim.objects.filter(assignment=task, released=False).exists()
    page = _page(Client(), task)
    assert "This task has expired" in page and "The researcher ended this task" not in page
