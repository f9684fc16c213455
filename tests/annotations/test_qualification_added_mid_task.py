"""A qualification test added to an open study applies to the tasks whose worker has not
consented yet, and to new ones; a worker who consented before the test existed finishes their
task as they were told. Before, the test gated them mid-task and failing it returned their task
unpaid."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Annotation, Assignment, QualificationGrant, QualificationTest
from annotations.services.assignment import assignment_consent, assignment_start
from annotations.services.qualification import qualification_test_delete, qualification_test_save
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


def test_a_task_the_test_was_not_asked_of_cannot_post_it_and_the_test_stays_the_researchers():
    """The worker consented before the test existed (so the page never shows it) and posts a test
    form anyway, guessing the question ids. Before, it was graded: the grant froze the test (its
    questions could no longer change, nor could it be deleted) and a pass gave the task its full
    time without an answer. Now nothing is graded; the task goes on as it was."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    browser = Client()
    task = start(browser, entry_url(study))
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=QUESTIONS)
    before = Assignment.objects.get(token=_token(task))
    assert not before.qualification_pending

    guessed = {f"q_{pk}": answer for pk in range(1, 400) for answer in ("yes",)}
    refused = browser.post(task + "qualification", guessed)

    assert refused.status_code == 400
    assert "does not ask for the qualification test" in refused.content.decode()
    assert not QualificationGrant.objects.filter(study=study).exists()
    after = Assignment.objects.get(pk=before.pk)
    assert (after.status, after.expires_at, after.qualification_pending) == (before.status, before.expires_at, False)
    assert not Annotation.objects.filter(claim__assignment=after).exists()
    # The researcher still changes the test, and may delete it.
    test = qualification_test_save(test=test, user=None, questions=QUESTIONS[:1])
    assert test.questions.count() == 1
    qualification_test_delete(test=test, user=None)
    # A newcomer's task is asked it: their form is graded, and sent twice, graded once.
    test = qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=None, questions=QUESTIONS)
    newcomer = Client()
    later = start(newcomer, entry_url(study))
    form = {f"q_{q.pk}": q.correct_answer for q in test.questions.all()}
    assert newcomer.post(later + "qualification", form).status_code == 302
    assert newcomer.post(later + "qualification", form).status_code == 302
    assert QualificationGrant.objects.get(study=study).passed
