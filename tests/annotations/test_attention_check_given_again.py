"""An attention check given in a task that ended without counting (left by its worker, or expired)
and never answered there is given again in the worker's next task
(``annotations.services.assignment._add_attention_checks``). Before, a check once placed in any
task counted as seen: a worker who left and started again had tasks without any check, so
leaving was a way round the checks, and the reading "without tasks that failed any attention
check" kept tasks that never had one. A check the worker answered, even in a task that does not
count, is known to them and is not given again."""
from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Annotation, Assignment, Claim
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import answer, complete_task, entry_url, start, task_of
from tests.annotations.test_services_impostor import published  # noqa: F401 (fixture)
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db
CHECK = "ATTENTION: choose No"


def _questions(task: Assignment) -> list[int | None]:
    """The task's questions in order: the attention check's id, None for a unit."""
    return list(Claim.objects.filter(assignment=task).order_by("position").values_list("attention_check_id", flat=True))


def test_a_check_left_unanswered_is_given_again_in_the_next_task():
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    check = AttentionCheckFactory(study=study, question=CHECK)
    client = Client()
    first = start(client, entry_url(study))
    assert _questions(task_of(first)) == [None, check.pk, None]
    assert client.post(first + "leave").status_code == 302  # nothing answered

    second = start(client, entry_url(study))
    assert _questions(task_of(second)) == [None, check.pk, None]
    assert client.post(second + "leave").status_code == 302  # left again: the check comes again
    third = start(client, entry_url(study))
    assert _questions(task_of(third)) == [None, check.pk, None]
    complete_task(client, third)
    assert client.post(third + "submit").status_code == 302

    assert task_of(third).status == Assignment.Status.SUBMITTED
    assert list(Annotation.objects.filter(step="attention").values_list("claim__assignment__token", "payload")) == [
        (task_of(third).token, {"correct": False})]  # complete_task answers "yes"
    # the tasks left keep their claims, given back as every claim of a task left is
    assert set(Claim.objects.filter(assignment__in=[task_of(first), task_of(second)]).values_list("released", flat=True)) \
        == {True}


def test_a_check_of_an_expired_task_never_answered_is_given_again(monkeypatch):
    clock = clock_installed(monkeypatch, timezone.now())
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    check = AttentionCheckFactory(study=study, question=CHECK)
    client = Client()
    first = start(client, entry_url(study))
    answer(client, first, "yes")  # the first unit's first answer: the task runs its full duration
    clock.advance(days=1)

    second = start(client, entry_url(study))  # the first task expired meanwhile
    assert task_of(first).status == Assignment.Status.EXPIRED
    assert _questions(task_of(second)) == [None, check.pk, None]
    answer(client, second, "yes")
    answer(client, second, "yes")  # the first unit done: the check is the next question
    assert CHECK in client.get(second).content.decode()


def test_a_check_answered_in_a_task_left_is_not_given_again():
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    check = AttentionCheckFactory(study=study, question=CHECK)
    client = Client()
    first = start(client, entry_url(study))
    assert _questions(task_of(first)) == [None, check.pk, None]
    for _step in ("before", "after", "attention"):
        _fields, response = answer(client, first, "no")
        assert response.status_code == 302
    assert Annotation.objects.filter(step="attention").count() == 1
    assert client.post(first + "leave").status_code == 302

    second = start(client, entry_url(study))
    assert _questions(task_of(second)) == [None, None]


def test_a_check_an_impostor_answered_is_given_to_the_worker(published):  # noqa: F811 (the fixture)
    """On Prolific, someone else started a task with the worker's id and answered its check; the
    worker's entry ends that task (``ended_as_impostor``). The worker never saw the check, so their
    own task asks it."""
    from tests.annotations.test_services_impostor import PID, hex24, url

    study, study_id, server = published
    check = AttentionCheckFactory(study=study, question=CHECK, correct_answer="no")
    impostor = Client()
    fake = hex24()
    task = start(impostor, url(study, study_id, fake))
    for _ in range(3):  # before and after of the first unit, then the check
        assert answer(impostor, task, "yes")[1].status_code == 302
    taken = Assignment.objects.get(platform_assignment_id=fake)
    assert Claim.objects.get(assignment=taken, attention_check=check).completed_at is not None
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    worker = Client()
    assert worker.get(url(study, study_id, real)).status_code == 200
    taken.refresh_from_db()
    assert taken.ended_as_impostor
    start(worker, url(study, study_id, real))

    assert check.pk in _questions(Assignment.objects.get(platform_assignment_id=real))
