"""Arriving from Prolific (issue 10, items 1, 5 and 7): the study is published on the local fake
Prolific server, and workers enter through the HTTP pages with the ids Prolific would send."""
from __future__ import annotations

import secrets

import pytest
from django.test import Client

from annotations.models import Assignment, Participant
from annotations.platforms import handoff
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, landing_form, start

PID, SESSION = "5a9d64f5f6dfdd0001eaa73d", "66a2bd0c9e8f7a6b5c4d3e2f"


def hex24() -> str:
    return secrets.token_hex(12)


@pytest.fixture
def published(prolific, db):
    """A Prolific study published through the app, and its Prolific study id."""
    study = make_study(platform="prolific", n_items=4, n_sources=1, units_per_task=2, status="draft", reward=2)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id


def prolific_url(study, study_id: str, *, pid: str = PID, session: str = SESSION) -> str:
    return entry_url(study, PROLIFIC_PID=pid, STUDY_ID=study_id, SESSION_ID=session)


def test_a_prolific_worker_enters_finishes_and_is_sent_back_with_the_studys_code(client, published):
    study, study_id = published
    task = start(client, prolific_url(study, study_id))
    complete_task(client, task)
    response = client.post(task + "submit")
    assert response.status_code == 302
    assert response["Location"] == f"{handoff.PROLIFIC_COMPLETE_URL}?cc={handoff.study_completion_code(study)}"
    assignment = Assignment.objects.select_related("participant").get()
    assert (assignment.participant.external_id, assignment.platform_assignment_id, assignment.platform_task_id) == (
        PID, SESSION, study_id)


@pytest.mark.parametrize("name, value", [
    ("SESSION_ID", f"{SESSION},99.99\n{SESSION}"),   # the bonus CSV injection of issue 10 item 1
    ("SESSION_ID", SESSION + "0"),
    ("SESSION_ID", "{{%SESSION_ID%}}"),
    ("SESSION_ID", ""),
    ("PROLIFIC_PID", "P1"),
    ("PROLIFIC_PID", PID[:-1] + "g"),
    ("PROLIFIC_PID", "{{%PROLIFIC_PID%}}"),
    ("STUDY_ID", "S1"),
    ("STUDY_ID", ""),
])
def test_prolific_parameters_outside_their_documented_format_are_refused(client, published, name, value):
    study, study_id = published
    params = {"PROLIFIC_PID": PID, "STUDY_ID": study_id, "SESSION_ID": SESSION, name: value}
    url = entry_url(study, **params)
    for response in (client.get(url), client.post(url, {"consent": "yes"})):
        assert response.status_code == 400 and name in response.content.decode()
    assert not Participant.objects.exists()


def test_study_id_must_be_this_studys_published_prolific_study(client, published):
    study, _ = published
    response = client.get(prolific_url(study, hex24()))  # well formed, but another study's
    assert response.status_code == 400 and "STUDY_ID is not this study" in response.content.decode()
    unpublished = make_study(platform="prolific")
    assert client.get(prolific_url(unpublished, hex24())).status_code == 400


def test_ids_in_uppercase_are_stored_as_prolific_writes_them(client, published):
    study, study_id = published
    start(client, prolific_url(study, study_id.upper(), pid=PID.upper(), session=SESSION.upper()))
    assignment = Assignment.objects.select_related("participant").get()
    assert (assignment.participant.external_id, assignment.platform_assignment_id) == (PID, SESSION)


def test_a_session_id_belongs_to_the_first_participant_seen_with_it(published):
    study, study_id = published
    start(Client(), prolific_url(study, study_id))
    response = Client().get(prolific_url(study, study_id, pid=hex24()))
    assert response.status_code == 403 and "another worker" in response.content.decode()


def test_a_victims_prolific_id_does_not_open_the_victims_task(published):
    study, study_id = published
    task = start(Client(), prolific_url(study, study_id))
    response = Client().get(prolific_url(study, study_id, session=hex24()))
    assert response.status_code == 409 and task not in response.content.decode()
    again = Client().get(prolific_url(study, study_id))  # the same session id: Prolific's own link again
    assert again.status_code == 302 and again["Location"] == task


def test_a_prolific_session_has_at_most_one_local_task_and_entering_it_again_shows_the_done_page(published):
    """Issue 20 item 2: two tasks shared one SESSION_ID, each approved by one "Approve all" call."""
    study, study_id = published
    url = prolific_url(study, study_id)
    browser = Client()
    second_tab = landing_form(browser, url)  # opened before the task was finished
    task = start(browser, url)
    complete_task(browser, task)
    browser.post(task + "submit")
    for other in (Client(), browser):
        response = other.get(url)
        assert response.status_code == 302 and response["Location"] == task
    again = browser.post(url, second_tab)
    assert again.status_code == 302 and again["Location"] == task
    assert Assignment.objects.filter(platform_assignment_id=SESSION).count() == 1
