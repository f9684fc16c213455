"""A failed qualification test under an identity the app cannot authenticate (a typed identifier,
an MTurk worker id) is set aside, never lost (``impostor.grant_for_retake``, ``grant_retake_start``).

A review of b40ec92, with probes through the worker pages:
1. the void deleted the failed grant outside the transaction that starts the new task, so a refused
   start (409 "There is no work left for you") left no grant at all: the failed attempt was lost
   and the browser that failed it no longer refused;
2. two browsers taking turns retook the test without end, and only the last attempt was stored;
3. a typed identifier was refused in a browser whose failed attempt had been set aside, while the
   same browser typing the failed identifier got a new test;
4. the page of the task a test was failed in said "You left this task" once the attempt was voided;
5. the log said "from another browser" for the same browser with cookies cleared.
Now the attempt is set aside in the transaction of the start and kept in the grant's ``voids``,
at most ``RETAKES_MAX`` times per participant and study, and one rule says whether a failed grant
refuses a browser (``participants.failed_grant_refuses_browser``).
"""
from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotations.models import Assignment, QualificationGrant, QualificationQuestion
from annotations.services.participants import RETAKES_MAX
from annotations.services.release import assignment_release
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, landing_form, start, task_of

pytestmark = pytest.mark.django_db

NOT_QUALIFIED_PAGE = "did not reach the pass mark this study needs"


def fail_test(client: Client, task: str, *, score: int = 0) -> QualificationGrant:
    """Answer the test of ``task`` with ``score`` right answers (below the pass mark of 2): the grant."""
    questions = QualificationQuestion.objects.filter(test__study=task_of(task).study).order_by("position")
    answers = {f"q_{q.pk}": q.correct_answer if i < score else ("no" if q.correct_answer == "yes" else "yes")
               for i, q in enumerate(questions)}
    assert client.post(task + "qualification", answers).status_code == 302
    grant = QualificationGrant.objects.get(participant=task_of(task).participant)
    assert (grant.passed, grant.assignment_id) == (False, task_of(task).pk)
    return grant


def enter(client: Client, url: str, identifier: str):
    return client.post(url, landing_form(client, url, identifier=identifier))


def test_a_refused_retake_sets_nothing_aside(db):
    """Probe 1: the start after the void is refused (no work left): the failed attempt stands."""
    study = make_study(n_items=2, n_sources=1, units_per_task=2, quota=1)
    add_qualification(study)
    url = entry_url(study)
    a, b = Client(), Client()
    failed = fail_test(a, start(a, url, identifier="x@lab.org"))  # its units go back
    other = Client()
    start(other, url)  # another worker takes every unit left
    refused = enter(b, url, "x@lab.org")
    assert refused.status_code == 409 and "There is no work left for you" in refused.content.decode()

    grant = QualificationGrant.objects.get()
    assert (grant.pk, grant.passed, grant.assignment_id, grant.voids) == (failed.pk, False, failed.assignment_id, [])
    again = enter(a, url, "x@lab.org")  # the browser that failed it is still refused
    assert again.status_code == 403 and "did not reach the pass mark" in again.content.decode()


def test_browsers_taking_turns_get_a_bounded_number_of_attempts_all_recorded(qualified_study, caplog):
    """Probe 2: A, B, A, B... every attempt set aside is kept; after RETAKES_MAX the failure stands everywhere."""
    url = entry_url(qualified_study)
    a, b = Client(), Client()
    browsers = [a, b] * RETAKES_MAX + [a]
    grant = fail_test(a, start(a, url, identifier="x@lab.org"), score=1)
    tasks, scores = [grant.assignment_id], [1]
    with caplog.at_level(logging.WARNING, logger="annotations.services.impostor"):
        for n, browser in enumerate(browsers[1:RETAKES_MAX + 1], start=1):
            response = enter(browser, url, "x@lab.org")
            assert response.status_code == 302, response.content.decode()[:300]
            grant = fail_test(browser, response["Location"], score=n % 2)
            tasks.append(grant.assignment_id)
            scores.append(n % 2)
    assert [(v["task"], v["score"], v["retake_task"]) for v in grant.voids] == [
        (tasks[i], scores[i], tasks[i + 1]) for i in range(RETAKES_MAX)]
    assert all(len(v["answers"]) == 3 and v["taken_at"] and v["voided_at"] for v in grant.voids)
    assert "from a browser whose study cookie does not name that task" in caplog.text

    for browser in (browsers[RETAKES_MAX + 1], Client()):  # the next browser, and a fresh one
        refused = enter(browser, url, "X@lab.org")
        assert refused.status_code == 403, refused.content.decode()[:300]
        assert f"taken under your identity {RETAKES_MAX + 1} times" in refused.content.decode()
    assert QualificationGrant.objects.get().voids == grant.voids
    assert Assignment.objects.count() == RETAKES_MAX + 1

    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    listing = admin.get("/admin/annotations/qualificationgrant/").content.decode()
    assert "failed attempts set aside" in listing.lower()
    page = admin.get(f"/admin/annotations/qualificationgrant/{grant.pk}/change/").content.decode()
    assert "voided_at" in page and str(tasks[0]) in page


def test_a_retake_that_is_never_graded_is_not_a_new_attempt(qualified_study):
    """A retake task returned without the test: the next entry retakes the same set-aside attempt."""
    url = entry_url(qualified_study)
    a, b = Client(), Client()
    failed = fail_test(a, start(a, url, identifier="x@lab.org"))
    first = task_of(enter(b, url, "x@lab.org")["Location"])
    assignment_release(assignment=first, status=Assignment.Status.RETURNED)  # handed back untaken
    second = enter(b, url, "x@lab.org")
    assert second.status_code == 302
    grant = QualificationGrant.objects.get()
    assert len(grant.voids) == 1 and grant.retake_task_id == task_of(second["Location"]).pk
    assert grant.assignment_id == failed.assignment_id
    assert fail_test(b, second["Location"]).voids == grant.voids


def test_a_typed_identifier_follows_the_same_rule_in_a_browser_whose_failure_was_set_aside(qualified_study):
    """Probe 3: X failed in A, then in B after setting A's attempt aside: A may type Y, B may not."""
    url = entry_url(qualified_study)
    a, b = Client(), Client()
    fail_test(a, start(a, url, identifier="x@lab.org"))
    fail_test(b, enter(b, url, "x@lab.org")["Location"])

    typed = enter(a, url, "y@lab.org")
    assert typed.status_code == 302, typed.content.decode()[:300]
    assert task_of(typed["Location"]).qualification_pending
    refused = enter(b, url, "y@lab.org")
    assert refused.status_code == 403 and "This browser took this study" in refused.content.decode()


def test_the_page_of_the_task_a_test_was_failed_in_says_so_after_a_retake(qualified_study):
    """Probe 4: A's failed task said "You left this task" once its attempt was voided."""
    url = entry_url(qualified_study)
    a, b = Client(), Client()
    failed_task = start(a, url, identifier="x@lab.org")
    fail_test(a, failed_task)
    retake = enter(b, url, "x@lab.org")["Location"]
    assert NOT_QUALIFIED_PAGE in a.get(failed_task).content.decode()

    questions = QualificationQuestion.objects.filter(test__study=qualified_study)
    assert b.post(retake + "qualification", {f"q_{q.pk}": q.correct_answer for q in questions}).status_code == 302
    assert QualificationGrant.objects.get().passed
    assert NOT_QUALIFIED_PAGE in a.get(failed_task).content.decode()
    assignment_release(assignment=task_of(retake), status=Assignment.Status.RETURNED)
    assert "You left this task" in b.get(retake).content.decode()
