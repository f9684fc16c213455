"""No one shuts a worker out of a study by failing its qualification test under their identity
(``annotations.services.impostor.impostor_grant_void``), and the landing page echoes no query string.

An audit, through the worker pages: anyone could enter with a worker's unauthenticated identity
(a participant identifier typed on a plain or open link, NFKC and case folded; an MTurk worker id
with an invented ``assignmentId`` and the public ``hitId``), consent, fail the test on purpose, and
the worker, arriving later in their own browser, got 403 "did not reach the pass mark" for good.
Now such a failed test refuses only the browser that took it (its study cookie names the task the
test was failed in); another browser arriving with that identity takes the test, and its attempt
replaces the failed one, which the grant keeps among its voids. A worker who failed in this browser is still refused; a single-person
link's participant (the link is the proof) is refused from any browser, as before.

The landing page's form action echoed the whole query string (a 500 KB parameter, a 508 KB page):
it is now the page's path and the arrival parameters the entry validated.
"""
from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from annotations.models import Assignment, Participant, QualificationGrant, QualificationQuestion
from annotations.services.links import links_generate, open_link_create
from annotations.services.platforms.access import OPERATOR
from studies.models import Platform
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, landing_form, start, task_of
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = pytest.mark.django_db

SANDBOX = "https://workersandbox.mturk.com"
ACTION = re.compile(r'<form method="post" action="([^"]*)"')


def mturk(assignment: str, worker: str = "AVICTIM1") -> dict:
    return {"assignmentId": assignment, "hitId": "3HIT", "workerId": worker, "turkSubmitTo": SANDBOX}


@pytest.fixture
def mturk_study(db, mturk):
    """An open MTurk study published as HIT 3HIT, with a qualification test."""
    study = make_study(platform=Platform.MTURK, n_items=8, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    add_qualification(study)
    return study


def take_test(client: Client, task: str, *, passing: bool) -> QualificationGrant:
    """Send the test of ``task`` (its questions answered right, or all wrong): the grant."""
    questions = QualificationQuestion.objects.filter(test__study=task_of(task).study).order_by("position")
    answers = {f"q_{q.pk}": q.correct_answer if passing else ("no" if q.correct_answer == "yes" else "yes")
               for q in questions}
    assert client.post(task + "qualification", answers).status_code == 302
    grant = QualificationGrant.objects.get(participant=task_of(task).participant)
    assert (grant.passed, grant.assignment_id) == (passing, task_of(task).pk)
    return grant


def assert_refused(response) -> None:
    assert response.status_code == 403, response.content.decode()[:300]
    assert "did not reach the pass mark" in response.content.decode()


def assert_takes_the_test(client: Client, response, failed: QualificationGrant) -> str:
    """``response`` gave a new task that shows the test; the failed attempt is set aside (kept in the
    grant's voids, the new task its retake)."""
    assert response.status_code == 302, response.content.decode()[:300]
    task = response["Location"]
    assert task_of(task).qualification_pending and task_of(task).pk != failed.assignment_id
    assert 'action="' + task + 'qualification"' in client.get(task).content.decode()
    grant = QualificationGrant.objects.get(pk=failed.pk)
    assert grant.set_aside and grant.retake_task_id == task_of(task).pk
    assert (grant.voids[-1]["task"], grant.voids[-1]["score"]) == (failed.assignment_id, failed.score)
    return task


# --- 1a. a typed identifier on a plain or open link --------------------------------------------------

@pytest.mark.parametrize("way", ["plain", "open"])
def test_an_impostor_failing_the_test_under_a_typed_identifier_does_not_shut_its_owner_out(qualified_study, way):
    url = entry_url(qualified_study) if way == "plain" else f"/w/o/{open_link_create(study=qualified_study, user=OPERATOR).token}/"
    impostor = Client()
    failed = take_test(impostor, start(impostor, url, identifier="alice@lab.org"), passing=False)

    alice = Client()  # her own browser, later; NFKC and case folding make her the same participant
    task = assert_takes_the_test(alice, alice.post(url, landing_form(alice, url, identifier="Alice@Lab.org")), failed)
    assert Participant.objects.filter(platform=Platform.LINK).count() == 1
    grant = take_test(alice, task, passing=True)  # her attempt replaces the failed one, with its answers
    assert QualificationGrant.objects.get().pk == grant.pk and len(grant.answers) == 3
    assert task_of(task).status == Assignment.Status.ACTIVE and not task_of(task).qualification_pending


def test_a_typed_identifier_that_failed_in_this_browser_is_still_refused(qualified_study):
    url = entry_url(qualified_study)
    browser = Client()
    failed = take_test(browser, start(browser, url, identifier="alice@lab.org"), passing=False)

    assert_refused(browser.post(url, landing_form(browser, url, identifier="ALICE@lab.org")))
    assert QualificationGrant.objects.get() == failed and Assignment.objects.count() == 1


def test_a_second_failure_in_the_new_browser_refuses_that_browser(qualified_study):
    url = entry_url(qualified_study)
    impostor, alice = Client(), Client()
    take_test(impostor, start(impostor, url, identifier="alice@lab.org"), passing=False)
    second = take_test(alice, start(alice, url, identifier="alice@lab.org"), passing=False)

    assert_refused(alice.post(url, landing_form(alice, url, identifier="alice@lab.org")))
    assert QualificationGrant.objects.get() == second


# --- 1b. an MTurk worker id ---------------------------------------------------------------------------

def test_an_impostor_failing_the_test_under_an_mturk_worker_id_does_not_shut_the_worker_out(mturk_study):
    impostor = Client()  # the victim's workerId, an invented assignmentId, the public hitId
    failed = take_test(impostor, start(impostor, entry_url(mturk_study, **mturk("3INVENTED1"))), passing=False)

    worker = Client()
    url = entry_url(mturk_study, **mturk("3REALASSIGN"))
    task = assert_takes_the_test(worker, worker.post(url, landing_form(worker, url)), failed)
    assert task_of(task).platform_assignment_id == "3REALASSIGN"
    grant = take_test(worker, task, passing=True)
    assert QualificationGrant.objects.get() == grant and Participant.objects.count() == 1


def test_an_mturk_worker_who_failed_the_test_in_this_browser_is_still_refused(mturk_study):
    browser = Client()
    failed = take_test(browser, start(browser, entry_url(mturk_study, **mturk("3ASSIGN1"))), passing=False)

    url = entry_url(mturk_study, **mturk("3ASSIGN2"))  # returned and accepted the HIT again
    assert_refused(browser.post(url, landing_form(browser, url)))
    assert QualificationGrant.objects.get() == failed and Assignment.objects.count() == 1


# --- a single-person link keeps today's rule: the link is the proof ---------------------------------

def test_a_single_person_links_failed_test_refuses_every_browser(qualified_study):
    url = f"/w/l/{links_generate(study=qualified_study, user=OPERATOR, n=1)[0].token}/"
    holder = Client()
    failed = take_test(holder, start(holder, url), passing=False)

    for browser in (Client(), holder):
        assert_refused(browser.post(url, landing_form(browser, url)))
    assert QualificationGrant.objects.get() == failed


# --- 2. the landing page's form action --------------------------------------------------------------

def action_of(response) -> str:
    assert response.status_code == 200, response.content.decode()[:300]
    return html.unescape(ACTION.search(response.content.decode()).group(1))


def test_the_landing_page_echoes_no_query_string(qualified_study):
    url = entry_url(qualified_study)
    response = Client().get(url + "?junk=" + "x" * 500_000)
    assert action_of(response) == url and len(response.content) < 50_000


def test_the_mturk_landing_page_sends_back_only_the_validated_arrival(mturk_study):
    browser = Client()
    params = {**mturk("3ASSIGN1"), "turkSubmitTo": SANDBOX + "/", "junk": "x" * 500_000}
    response = browser.get(entry_url(mturk_study, **params))
    action = action_of(response)
    assert action == entry_url(mturk_study, **mturk("3ASSIGN1")) and len(response.content) < 50_000
    # The form sent to that action is taken: the arrival is parsed again from it.
    sent = browser.post(action, landing_form(browser, entry_url(mturk_study, **params)))
    assert sent.status_code == 302 and task_of(sent["Location"]).platform_assignment_id == "3ASSIGN1"
