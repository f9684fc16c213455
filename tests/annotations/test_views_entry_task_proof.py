"""Issue 20, items 1 and 2, attacked through the HTTP pages with two browsers (two Django test
clients): a worker's cookie proves a task, not a person; a consent form is taken only from the
browser that loaded it; one platform assignment has at most one local task."""
from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from annotations.models import Assignment, Participant
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import PlatformAssignmentDone
from annotations.services.release import assignment_release
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, landing_form, start
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = pytest.mark.django_db

SANDBOX = "https://workersandbox.mturk.com"


def mturk(worker: str = "AVICTIM1", assignment: str = "3VICTIMREAL", hit: str = "3HIT") -> dict:
    return {"assignmentId": assignment, "hitId": hit, "workerId": worker, "turkSubmitTo": SANDBOX}


@pytest.fixture
def mturk_study(db, mturk):
    """An open MTurk study published as HIT 3HIT, the one its workers enter with."""
    study = make_study(platform=Platform.MTURK, n_items=8, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    return study


def leave(client: Client, task: str) -> None:
    assert client.post(task + "leave").status_code == 302


# --- item 1: the study cookie proves a task, not a participant ----------------------------------------

def test_an_old_cookie_naming_the_victim_does_not_open_or_rebind_the_victims_later_task(mturk_study):
    # While the victim is idle, the attacker enters with the victim's workerId and an invented
    # assignmentId, consents and leaves: the browser keeps the study cookie of the victim's participant.
    attacker = Client()
    leave(attacker, start(attacker, entry_url(mturk_study, **mturk(assignment="3INVENTEDONE"))))
    forged = entry_url(mturk_study, **mturk(assignment="3INVENTEDTWO"))
    form = landing_form(attacker, forged)  # loaded while the victim is still idle
    victim = Client()
    task = start(victim, entry_url(mturk_study, **mturk()))

    page = attacker.get(forged)
    assert page.status_code == 409 and "in progress" in page.content.decode()
    assert task not in page.content.decode() and "Location" not in page
    response = attacker.post(forged, form)
    assert response.status_code == 409 and task not in response.content.decode() and "Location" not in response

    victims_task = Assignment.objects.get(status=Assignment.Status.ACTIVE)
    assert victims_task.platform_assignment_id == "3VICTIMREAL"  # the hand-back still goes to the victim's
    assert victim.get(entry_url(mturk_study, **mturk()))["Location"] == task


def test_an_old_cookie_of_a_typed_identifier_does_not_open_that_persons_task_in_another_browser():
    study = make_study(n_items=8, n_sources=1, units_per_task=2)
    url = entry_url(study)
    attacker = Client()
    leave(attacker, start(attacker, url, identifier="victim.person@lab.example"))
    form = landing_form(attacker, url)  # loaded while the victim is still idle
    victim = Client()
    task = start(victim, url, identifier="Victim.Person@lab.example")

    page = attacker.get(url)
    assert page.status_code == 409 and task not in page.content.decode() and "Location" not in page
    response = attacker.post(url, form)  # no identifier: the cookie's person
    assert response.status_code == 409 and task not in response.content.decode() and "Location" not in response
    assert victim.get(url)["Location"] == task  # the browser that started the task still holds it


def test_the_browser_that_started_a_task_resumes_it_and_a_new_platform_assignment_moves_it_there(mturk_study):
    browser = Client()
    task = start(browser, entry_url(mturk_study, **mturk()))
    assert browser.get(entry_url(mturk_study, **mturk()))["Location"] == task
    # Returned on MTurk and accepted again: a new assignmentId, in the browser that holds the task.
    assert start(browser, entry_url(mturk_study, **mturk(assignment="3ACCEPTEDAGAIN"))) == task
    assert Assignment.objects.get().platform_assignment_id == "3ACCEPTEDAGAIN"


def test_a_consent_form_replayed_from_another_browser_does_not_return_its_task():
    study = make_study(n_items=8, n_sources=1, units_per_task=2)
    url = entry_url(study)
    browser = Client()
    form = landing_form(browser, url)
    task = browser.post(url, form)["Location"]
    replay = Client().post(url, form)
    assert replay.status_code == 400 and "start again" in replay.content.decode()
    assert task not in replay.content.decode() and "Location" not in replay
    assert Participant.objects.count() == 1 and Assignment.objects.count() == 1


def test_a_consent_form_refused_once_is_not_trusted_when_sent_again():
    """A form refused because the person's task is held by another browser leaves nothing behind:
    sent again from the same browser it is refused again, never taken as the browser holding it."""
    study = make_study(n_items=8, n_sources=1, units_per_task=2)
    url = entry_url(study)
    held = start(Client(), url, identifier="lab-7")
    stranger = Client()
    form = landing_form(stranger, url, identifier="LAB-7")
    for _ in range(2):
        response = stranger.post(url, form)
        assert response.status_code == 409 and held not in response.content.decode() and "Location" not in response
    assert Assignment.objects.count() == 1


# --- item 2: one platform assignment, at most one local task ------------------------------------------

def test_entering_again_with_a_submitted_mturk_assignment_shows_its_done_page(mturk_study):
    url = entry_url(mturk_study, **mturk(worker="ADUPWORKER1", assignment="3DUPASG1"))
    first = Client()
    task = start(first, url)
    complete_task(first, task)
    assert first.post(task + "submit").status_code == 302
    for browser in (first, Client()):
        response = browser.get(url)
        assert response.status_code == 302 and response["Location"] == task
        assert 'id="handback-form"' in browser.get(task).content.decode()  # the done page
    assert Assignment.objects.count() == 1
    assert Assignment.objects.get().status == Assignment.Status.SUBMITTED


def test_a_consent_post_with_a_submitted_assignment_gives_its_done_page_not_a_second_task(mturk_study):
    url = entry_url(mturk_study, **mturk(worker="ADUPWORKER1", assignment="3DUPASG1"))
    browser = Client()
    second_tab = landing_form(browser, url)  # opened before the task was finished
    task = start(browser, url)
    complete_task(browser, task)
    browser.post(task + "submit")
    again = browser.post(url, second_tab)
    assert again.status_code == 302 and again["Location"] == task
    assert Assignment.objects.count() == 1


def test_the_service_refuses_a_second_task_for_a_finished_platform_assignment(mturk_study):
    worker = Participant.objects.create(platform=Platform.MTURK, external_id="ADUPWORKER1")
    first = assignment_start(study=mturk_study, participant=worker, platform_assignment_id="3DUPASG1", consented=True)
    for claim in first.claims.all():
        for step in ("before", "after"):
            annotation_submit(assignment=first, claim=claim, step=step, answer="yes")
    assignment_submit(assignment=first)
    with pytest.raises(PlatformAssignmentDone) as refused:
        assignment_start(study=mturk_study, participant=worker, platform_assignment_id="3DUPASG1", consented=True)
    assert refused.value.assignment.pk == first.pk
    assert Assignment.objects.count() == 1


def test_the_database_refuses_two_live_tasks_for_one_platform_assignment(mturk_study):
    """The constraint under the service: a second task with a live task's platform assignment id
    cannot be stored, whatever writes it (here a raw update, as a race or a bug would)."""
    one, two = (Participant.objects.create(platform=Platform.MTURK, external_id=w) for w in ("AONE", "ATWO"))
    assignment_start(study=mturk_study, participant=one, platform_assignment_id="3SHARED", consented=True)
    second = assignment_start(study=mturk_study, participant=two, platform_assignment_id="3OWN", consented=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.filter(pk=second.pk).update(platform_assignment_id="3SHARED")
    expire = assignment_release(assignment=second, status=Assignment.Status.EXPIRED)
    assert expire
    Assignment.objects.filter(pk=second.pk).update(platform_assignment_id="3SHARED")  # expired: not taken
    assert Assignment.objects.filter(platform_assignment_id="3SHARED").count() == 2
