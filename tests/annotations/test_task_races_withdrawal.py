"""A worker's answer, finish, leave or consent that races their own withdrawal is refused with a
clear page (410: the task has ended), never a server error. The withdrawal
(``withdrawal.participant_withdraw``) deletes the worker's task; a request of theirs that read the
task before then finds no row to lock (``release.lock``), which refuses it as ``TaskEnded`` (an
``AnnotationError`` the task views show like every refusal). Before, ``release.lock`` raised
``Assignment.DoesNotExist``, which no view caught: "Server Error (500)".

On SQLite the withdrawal runs between the view's read of the task and the service's lock (the
service patched to withdraw first); on PostgreSQL the answer, sent while the withdrawal holds the
task's row lock, waits for it, then finds the task gone."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from annotations.models import Assignment, Withdrawal
from annotations.services import withdrawal as withdrawal_service
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from annotations.views import task as task_views
from lab.pseudonyms import worker_pseudonym
from tests.annotations.pages import form_fields
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work


def _withdraw(task: Assignment):
    participant = task.participant
    return participant_withdraw(user=OPERATOR, study=task.study_id,
                                pseudonym=worker_pseudonym(participant.platform, participant.external_id))


def _withdrawn_first(monkeypatch, name: str, task: Assignment) -> None:
    """The view's service ``name`` withdraws ``task``'s worker before it runs: the view has read the
    task, the service's lock finds it gone."""
    service = getattr(task_views, name)

    def withdrawn_meanwhile(**kwargs):
        assert _withdraw(task).created
        return service(**kwargs)

    monkeypatch.setattr(task_views, name, withdrawn_meanwhile)


def _assert_refused_as_ended(task: Assignment, response) -> None:
    text = response.content.decode()
    assert response.status_code == 410, (response.status_code, text[:500])
    assert "This task has ended: it was withdrawn from the study" in text
    assert not Assignment.objects.filter(pk=task.pk).exists()  # the withdrawal went through
    assert Withdrawal.objects.filter(study_id=task.study_id).count() == 1


def _study(name: str):
    alice, _ = staff_client("alice")
    return open_utility_study(name=name, owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["answer", "submit", "leave"])
def test_a_request_whose_task_the_withdrawal_erased_meanwhile_is_refused_not_failed(monkeypatch, action):
    study = _study(f"race-{action}")
    # mid-task for an answer or a leave; every answer given for a finish (not submitted: nothing owed)
    task = work(study, f"pwithdraws{action}", steps=None if action == "submit" else 1, submit=False)
    browser = Client()
    page = reverse("annotations:assignment", args=[task.token])
    data = {}
    if action == "answer":
        data = {**form_fields(browser.get(page).content.decode()), "answer": "yes"}
    service = {"answer": "annotation_submit_with_task", "submit": "assignment_submit",
               "leave": "assignment_return"}[action]
    _withdrawn_first(monkeypatch, service, task)
    _assert_refused_as_ended(task, browser.post(reverse(f"annotations:{action}", args=[task.token]), data))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_answer_waiting_on_the_withdrawals_lock_is_refused_once_the_task_is_gone(monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    study = _study("race-answer-pg")
    task = work(study, "pwithdrawspg", steps=1, submit=False)
    browser = Client()
    answer_url = reverse("annotations:answer", args=[task.token])
    data = {**form_fields(browser.get(reverse("annotations:assignment", args=[task.token])).content.decode()),
            "answer": "yes"}
    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: _withdraw(task))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the task's row FOR UPDATE, not yet committed
    answered = Step(lambda: browser.post(answer_url, data))
    answered.start()
    try:
        assert waits_on_a_lock(answered), "the answer did not wait for the withdrawal"
    finally:
        release.set()
    assert withdrawal.outcome().created
    _assert_refused_as_ended(task, answered.outcome())

