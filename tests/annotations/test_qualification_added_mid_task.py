"""A qualification test added to an open study applies to the tasks whose worker has not
consented yet, and to new ones; a worker who consented before the test existed finishes their
task as they were told. Before, the test gated them mid-task and failing it returned their task
unpaid."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, QualificationTest
from annotations.services.assignment import assignment_consent, assignment_start
from annotations.services.qualification import qualification_test_save
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.pages import answer, complete_task, entry_url, start

pytestmark = pytest.mark.django_db

QUESTIONS = [{"question": "Is Paris in France?", "choices": ["yes", "no"], "correct_answer": "yes"},
             {"question": "Is Lyon in Spain?", "choices": ["yes", "no"], "correct_answer": "no"}]


def _token(task_url: str) -> str:
    return task_url.rstrip("/").rsplit("/", 1)[-1]


def test_a_worker_who_consented_before_the_test_existed_finishes_without_it():
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    browser = Client()
    task = start(browser, entry_url(study))  # consented on the landing page; the first question on screen
    assert 'name="claim"' in browser.get(task).content.decode()

    qualification_test_save(test=QualificationTest(study=study, pass_mark=2), user=None, questions=QUESTIONS)

    assert 'name="q_' not in browser.get(task).content.decode()  # no test sprung on them mid-task
    assert answer(browser, task)[1].status_code == 302
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302
    done = Assignment.objects.get(token=_token(task))
    assert done.status == Assignment.Status.SUBMITTED and not done.qualification_pending

    # A worker who comes after the test was added takes it first, as before.
    newcomer = Client()
    later = start(newcomer, entry_url(study))
    assert 'name="q_' in newcomer.get(later).content.decode()
    assert Assignment.objects.get(token=_token(later)).qualification_pending


def test_a_task_not_yet_consented_to_when_the_test_is_added_waits_for_it():
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    task = assignment_start(study=study, participant=ParticipantFactory())  # consent still ahead
    assert task.consented_at is None

    qualification_test_save(test=QualificationTest(study=study, pass_mark=2), user=None, questions=QUESTIONS)

    task.refresh_from_db()
    assert task.qualification_pending
    assignment_consent(assignment=task)
    assert 'name="q_' in Client().get(f"/w/a/{task.token}/").content.decode()
