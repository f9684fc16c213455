"""A worker who returns the HIT (or the Prolific place) and accepts it again comes back, in the
browser that holds the task, with a new platform assignment id: the consent resumes the task in
progress and moves it there (``services.entry.moves_to_new_platform_assignment``), with its
deadlines, which count from its start. The landing page states what is left of that time, and the
consent's check (``deadlines.platform_time_run_out``) counts from the task's start, not from the
new landing. Before, the page promised the full 30 minutes and a consent with 35 seconds left was
taken. Through the pages, with the project's clock."""
from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Assignment
from annotations.services.deadlines import assignment_duration
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import answer, entry_url, landing_form, start
from tests.annotations.platforms.mturk_stubs import published_as
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db

SANDBOX = "https://workersandbox.mturk.com"


def mturk(assignment: str) -> dict:
    return {"assignmentId": assignment, "hitId": "3HIT", "workerId": "AWORKER1", "turkSubmitTo": SANDBOX}


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch, timezone.now().replace(hour=12, minute=0, second=30, microsecond=0))


@pytest.fixture
def study(mturk, clock):
    """An open MTurk study with 30-minute tasks and an estimate of 3 minutes a task."""
    study = make_study(platform=Platform.MTURK, n_items=8, n_sources=1, units_per_task=2,
                       estimated_minutes_per_task=3)
    published_as(mturk[1], study, "3HIT")
    assert assignment_duration(study) == timedelta(minutes=30)
    return study


def _started_and_reaccepted(study, clock, *, share: float) -> tuple[Client, Assignment, str, dict]:
    """Start with 3FIRSTACCEPT, answer one question, let ``share`` of the 30 minutes pass, and open
    the entry with the new assignment 3ACCEPTEDAGAIN in the same browser: its landing page and form."""
    browser = Client()
    task_url = start(browser, entry_url(study, **mturk("3FIRSTACCEPT")))
    assert answer(browser, task_url)[1].status_code == 302
    task = Assignment.objects.get()
    assert task.expires_at == task.created_at + timedelta(minutes=30)  # the first answer gave the full time
    clock.advance(minutes=30 * share)
    url = entry_url(study, **mturk("3ACCEPTEDAGAIN"))
    page = html.unescape(browser.get(url).content.decode())
    return browser, task, url, {**landing_form(browser, url), "page": page}


def test_a_reaccepted_task_with_too_little_time_left_is_refused_and_not_moved(study, clock):
    browser, task, url, form = _started_and_reaccepted(study, clock, share=0.98)
    page = form.pop("page")

    response = browser.post(url, form)

    assert response.status_code == 403 and "too little of it is left" in response.content.decode()
    kept = Assignment.objects.get()
    assert (kept.pk, kept.platform_assignment_id, kept.expires_at) == (task.pk, "3FIRSTACCEPT", task.expires_at)
    assert kept.status == Assignment.Status.ACTIVE
    assert "30 minutes in all" not in page and "you have less than a minute left to finish it" in page


def test_a_reaccepted_task_with_time_left_states_it_and_is_moved_with_its_deadline(study, clock):
    browser, task, url, form = _started_and_reaccepted(study, clock, share=0.8)
    page = form.pop("page")
    assert "you have 6 minutes left to finish it" in page and "30 minutes" not in page

    response = browser.post(url, form)

    assert response.status_code == 302 and response["Location"].rstrip("/").endswith(task.token)
    moved = Assignment.objects.get()
    assert (moved.pk, moved.platform_assignment_id) == (task.pk, "3ACCEPTEDAGAIN")
    assert (moved.created_at, moved.expires_at) == (task.created_at, task.expires_at)


def test_a_fresh_task_is_still_told_the_full_time(study, clock):
    page = html.unescape(Client().get(entry_url(study, **mturk("3FIRSTACCEPT"))).content.decode())
    assert "you have 30 minutes in all from then to finish" in page


def test_a_reaccepted_task_with_no_answer_yet_is_told_and_checked_against_its_first_answer_deadline(study, clock):
    """A task with no answer yet ends at its first-answer deadline (10 minutes from the consent),
    not 30 minutes from its start: with 20 seconds of it left, the page says so, and the consent is
    refused, as for a task whose full time ran out (before: "20 minutes left", and the task moved
    with 20 seconds)."""
    browser = Client()
    start(browser, entry_url(study, **mturk("3FIRSTACCEPT")))
    task = Assignment.objects.get()
    assert task.expires_at < task.created_at + timedelta(minutes=30)  # the first answer is due first
    clock.advance(seconds=(task.expires_at - timezone.now()).total_seconds() - 20)
    url = entry_url(study, **mturk("3ACCEPTEDAGAIN"))
    page = html.unescape(browser.get(url).content.decode())
    assert "you have less than a minute left to give its first answer" in page, page[:3000]

    response = browser.post(url, landing_form(browser, url))

    assert response.status_code == 403 and "too little of it is left" in response.content.decode()
    kept = Assignment.objects.get()
    assert (kept.platform_assignment_id, kept.expires_at) == ("3FIRSTACCEPT", task.expires_at)


def test_the_page_shown_again_after_a_refused_form_states_the_time_left_and_the_tasks_questions(study, clock):
    """A form sent without the box ticked gets the landing page again: it says what its first showing
    said, the time left of the task in progress and its own questions (before: the full 30 minutes,
    as for a new task)."""
    browser, task, url, form = _started_and_reaccepted(study, clock, share=0.8)
    form.pop("page")
    del form["consent"]

    response = browser.post(url, form)

    page = html.unescape(response.content.decode())
    assert response.status_code == 400 and "Please tick the box" in page
    assert "you have 6 minutes left to finish it" in page and "30 minutes" not in page
    assert f"{task.claims.count()} questions." in page
    assert Assignment.objects.get().platform_assignment_id == "3FIRSTACCEPT"  # nothing moved
