"""Closing a study stops recruiting, not the work already started (``study_close``: "work already
started can still be submitted"): through every way in, a closed study still opens a task in
progress to whoever may resume it and a finished task's done page (completion code, hand-back);
only the landing page and a new consent are refused."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, ConsentReceipt, OpenLink, Participant
from annotations.services.assignment import assignment_start
from annotations.services.errors import StudyNotOpen
from annotations.services.links import open_link_create
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from studies.models import Platform, Study
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.pages import answer, complete_task, entry_url, landing_form, start
from tests.annotations.platforms.mturk_stubs import published_as, queue_expire

pytestmark = pytest.mark.django_db

SANDBOX = "https://workersandbox.mturk.com"


def mturk(worker: str = "AWORKER1", assignment: str = "3ASSIGN1") -> dict:
    return {"assignmentId": assignment, "hitId": "3HIT", "workerId": worker, "turkSubmitTo": SANDBOX}


@pytest.fixture
def mturk_study(db, mturk):
    """An open MTurk study published as HIT 3HIT, the one its workers enter with; MTurk answers
    the close the tests make (the HIT expired)."""
    study = make_study(platform=Platform.MTURK, n_items=6, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    queue_expire(mturk[1], "3HIT")
    return study


def close(study):
    study_close(user=OPERATOR, study=study)
    assert Study.objects.get(pk=study.pk).status == Study.Status.CLOSED


def test_a_submitted_mturk_worker_reopening_the_hit_after_the_close_gets_the_done_page(mturk_study):
    browser = Client()
    task = start(browser, entry_url(mturk_study, **mturk()))
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302
    close(mturk_study)
    code = Assignment.objects.get().completion_code
    # In MTurk's frame cookies may be withheld (a new browser): the assignment id is the way back;
    # the browser that did the task too.
    for client in (Client(), browser):
        response = client.get(entry_url(mturk_study, **mturk()))
        assert response.status_code == 302 and response["Location"] == task
        done = client.get(task).content.decode()
        assert code in done and "externalSubmit" in done


def test_an_mturk_worker_mid_task_at_the_close_finishes_and_submits(mturk_study):
    browser = Client()
    task = start(browser, entry_url(mturk_study, **mturk()))
    assert answer(browser, task)[1].status_code == 302
    close(mturk_study)
    frame = Client()  # reopened from MTurk, without the cookie
    response = frame.get(entry_url(mturk_study, **mturk()))
    assert response.status_code == 302 and response["Location"] == task
    assert browser.get(entry_url(mturk_study, **mturk()))["Location"] == task
    complete_task(frame, task)
    assert frame.post(task + "submit").status_code == 302
    assert Assignment.objects.get().status == Assignment.Status.SUBMITTED
    assert Assignment.objects.get().completion_code in frame.get(task).content.decode()


def test_a_closed_study_takes_no_new_worker_and_keeps_no_one(mturk_study):
    holder = Client()
    task = start(holder, entry_url(mturk_study, **mturk()))
    late = Client()
    url = entry_url(mturk_study, **mturk(worker="ALATECOMER", assignment="3LATE"))
    form = landing_form(late, url)  # the landing page, loaded before the close
    close(mturk_study)
    for response in (late.get(url), late.post(url, form)):
        assert response.status_code == 403 and "Study closed" in response.content.decode()
    # Another worker's id with the holder's assignment id, and the holder's id with another one.
    assert Client().get(entry_url(mturk_study, **mturk(worker="AOTHER"))).status_code == 403
    response = Client().get(entry_url(mturk_study, **mturk(assignment="3FORGED")))
    assert response.status_code == 409 and task not in response.content.decode()
    assert Client().get(entry_url(mturk_study, **{**mturk(), "assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE"})
                        ).status_code == 403  # the preview
    assert not Participant.objects.filter(external_id="ALATECOMER").exists()
    assert Assignment.objects.count() == 1


def test_a_consent_form_retried_after_the_close_gets_the_task_it_gave(mturk_study):
    url = entry_url(mturk_study, **mturk())
    browser = Client()
    form = landing_form(browser, url)
    task = browser.post(url, form)["Location"]
    close(mturk_study)
    del browser.cookies[f"rl_w{mturk_study.pk}"]  # the response was lost
    retry = browser.post(url, form)
    assert retry.status_code == 302 and retry["Location"] == task
    assert ConsentReceipt.objects.count() == 1 and Assignment.objects.count() == 1


@pytest.fixture
def link_study(db):
    return make_study(n_items=6, n_sources=1, units_per_task=2)


@pytest.mark.parametrize("way", ["open link", "plain link"])
def test_an_anonymous_holder_finishes_after_the_close_and_sees_the_done_page(link_study, way):
    url = f"/w/o/{open_link_create(study=link_study, user=OPERATOR).token}/" if way == "open link" else entry_url(
        link_study)
    browser = Client()
    task = start(browser, url)
    stranger = Client()
    form = landing_form(stranger, url)
    close(link_study)
    if way == "open link":
        assert not OpenLink.objects.get().active
    response = browser.get(url)
    assert response.status_code == 302 and response["Location"] == task
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302
    response = browser.get(url)  # the done page, with the code, instead of "closed"
    assert response.status_code == 302 and response["Location"] == task
    assert Assignment.objects.get().completion_code in browser.get(task).content.decode()
    # Nobody else: a new browser, and a form loaded before the close.
    for response in (stranger.get(url), stranger.post(url, form), Client().get(url)):
        assert response.status_code == 403 and "Study closed" in response.content.decode()
    assert browser.post(url, {"consent": "yes", "nonce": form["nonce"]}).status_code in (400, 403)
    assert Participant.objects.count() == 1 and Assignment.objects.count() == 1


def test_a_start_that_read_the_study_before_the_close_committed_makes_no_task(db):
    """The consent read the study while it was open; the close committed before its claim ran. The
    claim reads the status again under its lock of the study's row (``_qualification_pending``), so
    no task starts in the closed study and no unit is claimed."""
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    read_while_open = Study.objects.get(pk=study.pk)
    close(study)
    with pytest.raises(StudyNotOpen):
        assignment_start(study=read_while_open, participant=ParticipantFactory())
    assert not Assignment.objects.filter(study=study).exists()
    assert not study.units.filter(n_claimed__gt=0).exists()
