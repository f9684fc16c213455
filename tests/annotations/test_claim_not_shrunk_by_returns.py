"""A worker cannot shrink their own task by returning tasks (``assignment._short_by_own_returns``).

The questions of a task the worker left (or let expire) stay seen by them, while its units go back
to the pool: before, the next task took whatever unseen questions were left, even one, and was paid
as a full task (7 questions, 3 a task: left, left, then a task of 1). Now a start that would come
out short only because of the worker's own returned or expired tasks is refused (409, saying why);
a short last task when the pool runs out for everyone is given as before, and attention checks do
not count as the task's questions."""
from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Assignment, Claim, Unit, WorkerBlock
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.publish import study_publish
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import complete_task, consent, entry_url, start, task_of
from tests.annotations.test_services_impostor import PID, impostor_task
from tests.annotations.test_services_impostor import url as prolific_url
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _units(task: Assignment) -> int:
    return Claim.objects.filter(assignment=task, unit__isnull=False).count()


def _leave(client: Client, url: str) -> Assignment:
    task = start(client, url)
    assert client.post(task + "leave").status_code == 302  # nothing answered: the task is returned
    return task_of(task)


def _refused_for_returns(response) -> None:
    assert response.status_code == 409, response.content.decode()[:300]
    page = html.unescape(response.content.decode())
    assert "not a full task left for you" in page and "returned or let expire" in page, page[:1500]


def test_returning_tasks_does_not_shrink_the_next_one():
    study = make_study(n_items=7, n_sources=1, units_per_task=3)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")  # in every task: not a unit
    client, url = Client(), entry_url(study)
    left = [_leave(client, url), _leave(client, url)]
    assert [_units(task) for task in left] == [3, 3]
    assert {task.status for task in left} == {Assignment.Status.RETURNED}

    _refused_for_returns(consent(client, url))  # 1 unseen question left, 6 of theirs back in the pool

    assert Assignment.objects.filter(study=study).count() == 2  # no third task
    assert not Unit.objects.filter(study=study, n_claimed__gt=0).exists()  # the refused claim holds nothing
    assert _units(task_of(start(Client(), url))) == 3  # another worker still gets a full task


def test_a_short_last_task_when_the_pool_runs_out_for_everyone_is_given():
    study = make_study(n_items=4, n_sources=1, quota=1, units_per_task=3)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    x, y, z, url = Client(), Client(), Client(), entry_url(study)
    held = start(x, url)  # x holds 3 of the 4 questions
    short = start(y, url)
    assert _units(task_of(short)) == 1  # y gets the one left: a short task, no returns of theirs
    x.post(held + "leave")
    done = start(z, url)  # x's three questions go to z (quota 1: full once z submits)
    assert _units(task_of(done)) == 3
    complete_task(z, done)
    assert z.post(done + "submit").status_code == 302
    y.post(short + "leave")  # the question x has not seen is free again

    last = task_of(start(x, url))

    assert _units(last) == 1  # the one question left for anyone: x's returned ones are full
    assert Claim.objects.filter(assignment=last, attention_check__isnull=False).count() == 1


def test_a_short_last_task_after_the_workers_own_submitted_work_is_given():
    study = make_study(n_items=7, n_sources=1, units_per_task=3)
    client, url = Client(), entry_url(study)
    for _ in range(2):
        task = start(client, url)
        complete_task(client, task)
        assert client.post(task + "submit").status_code == 302
        assert task_of(task).status == Assignment.Status.SUBMITTED

    assert _units(task_of(start(client, url))) == 1  # answered, not returned: no question twice


def test_a_task_let_expire_counts_as_returned():
    study = make_study(n_items=5, n_sources=1, units_per_task=3)
    client, url = Client(), entry_url(study)
    task = task_of(start(client, url))
    Assignment.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    _refused_for_returns(consent(client, url))  # expires it first; then 2 unseen questions of 3

    assert Assignment.objects.filter(study=study).count() == 1  # no new task


def test_a_task_an_impostor_started_under_the_workers_id_does_not_refuse_the_worker(prolific):
    """On Prolific someone started a task with the worker's id (session A); the real worker's entry
    (session B) ended it as an impostor's (``ended_as_impostor``). The worker did not return it: its
    questions stay seen by them, but its units do not count against their start, which gets the
    question left (before: refused, "tasks you returned or let expire earlier still count")."""
    _platform, server = prolific
    study = make_study(platform="prolific", n_items=3, n_sources=1, units_per_task=2, status="draft", reward=2)
    study_id = study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id
    study.refresh_from_db()
    _impostor, _url, taken = impostor_task(study, study_id)  # 2 of the 3 questions, under the worker's id
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    assert worker.get(prolific_url(study, study_id, real)).status_code == 200
    taken.refresh_from_db()
    assert (taken.status, taken.ended_as_impostor) == (Assignment.Status.RETURNED, True)

    response = consent(worker, prolific_url(study, study_id, real))

    assert response.status_code == 302, html.unescape(response.content.decode())[:600]
    mine = Assignment.objects.get(platform_assignment_id=real)
    assert mine.participant_id == taken.participant_id and mine.status == Assignment.Status.ACTIVE
    assert _units(mine) == 1  # the one question the impostor's task did not hold


def test_a_task_a_block_ended_does_not_refuse_the_worker_once_the_block_is_lifted():
    """A researcher's block ended the worker's task (``ended_by_researcher``); the block is lifted
    later (its row deleted: the app has no unblock). The worker did not return that task: it does
    not refuse their next start, which gets the question left."""
    alice, _ = staff_client("alice")
    study = open_utility_study(name="alice-1", owner=alice, n_items=3, n_sources=1, quota=2, units_per_task=2)
    task = work(study, "pblocked1", steps=1, submit=False)  # mid-task, 2 of the 3 questions
    worker_block(user=alice, study=study, participant=task.participant, reason="Copied answers.")
    task.refresh_from_db()
    assert (task.status, task.ended_by_researcher) == (Assignment.Status.RETURNED, True)
    WorkerBlock.objects.filter(participant=task.participant).delete()

    again = work(study, "pblocked1", steps=0, submit=False)

    assert again.status == Assignment.Status.ACTIVE and _units(again) == 1
