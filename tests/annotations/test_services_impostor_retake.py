"""A Prolific worker cannot retake a failed qualification test through the impostor check
(``annotations.services.impostor.impostor_grant_void``).

The check voids a failed test taken in a task whose session Prolific denies when the worker comes
with a session Prolific confirms: meant for an impostor who took the test with the worker's id. The
worker themself could enter with an invented SESSION_ID, fail the test, come back with their real
session (voided), leave, and do it again as often as they liked. Now a failed test is never voided
for the browser that holds the task it was failed in, and at most once per participant and study."""
from __future__ import annotations

import secrets

import pytest
from django.test import Client

from annotations.models import Assignment, QualificationGrant
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, landing_form, start

PID = "5a9d64f5f6dfdd0001eaa73d"
WRONG, RIGHT = ("no", "yes", "no"), ("yes", "no", "yes")  # add_qualification's key: yes, no, yes


@pytest.fixture
def published(prolific, db):
    """A Prolific study with a qualification test, its Prolific study id, the test and the worker's
    one real session (a submission the fake Prolific server files under the worker)."""
    _platform, server = prolific
    study = make_study(platform="prolific", n_items=20, n_sources=1, units_per_task=2, status="draft", reward=2)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    test = add_qualification(study)
    real = server.add_submission(publication.prolific_study_id, participant_id=PID, status="ACTIVE")["id"]
    return study, publication.prolific_study_id, test, real


def url(study, study_id: str, session: str) -> str:
    return entry_url(study, PROLIFIC_PID=PID, STUDY_ID=study_id, SESSION_ID=session)


def invented() -> str:
    return secrets.token_hex(12)


def fail_test(browser: Client, study, study_id: str, test, session: str) -> Assignment:
    """``browser`` enters with the worker's id and ``session`` and fails the test: its task."""
    task_url = start(browser, url(study, study_id, session))
    ids = [question.pk for question in test.questions.order_by("position")]
    assert browser.post(task_url + "qualification", {f"q_{pk}": v for pk, v in zip(ids, WRONG, strict=True)}
                        ).status_code == 302
    task = Assignment.objects.get(platform_assignment_id=session)
    assert QualificationGrant.objects.get(study=study, passed=False).assignment_id == task.pk
    return task


def consent(browser: Client, study, study_id: str, session: str):
    return browser.post(url(study, study_id, session), landing_form(browser, url(study, study_id, session)))


def assert_refused_and_stands(response, task: Assignment) -> None:
    assert response.status_code == 403, response.content.decode()[:300]
    assert "did not reach the pass mark" in response.content.decode()
    assert QualificationGrant.objects.filter(assignment=task, passed=False).count() == 1
    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.RETURNED, False)


def test_a_second_failed_test_under_an_invented_session_is_not_voided(published):
    study, study_id, test, real = published
    first = fail_test(Client(), study, study_id, test, invented())
    worker = Client()
    response = consent(worker, study, study_id, real)  # voided once: an impostor may have taken it
    assert response.status_code == 302, response.content.decode()[:300]
    first.refresh_from_db()
    assert first.ended_as_impostor and not QualificationGrant.objects.exists()
    assert worker.post(response["Location"] + "leave").status_code == 302  # leaves without taking the test

    second = fail_test(Client(), study, study_id, test, invented())  # a fresh browser, another invented session

    assert_refused_and_stands(consent(Client(), study, study_id, real), second)
    assert_refused_and_stands(consent(worker, study, study_id, real), second)


def test_the_browser_that_failed_the_test_under_an_invented_session_cannot_void_it(published):
    study, study_id, test, real = published
    browser = Client()
    task = fail_test(browser, study, study_id, test, invented())

    assert_refused_and_stands(consent(browser, study, study_id, real), task)
