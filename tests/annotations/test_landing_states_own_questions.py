"""The landing page tells a worker how many questions their task will ask, by the rule the task is
made with: an attention check the worker answered in an earlier task is not asked again
(``selectors.entry.attention_checks_to_give``, which the claim follows too), so a returning
worker's count leaves it out. Before, every landing page counted all of the study's checks, and a
worker's later tasks were announced with more questions than they had. A check given back (left
unanswered in a task that ended without counting, or in one still active past its deadline) is
asked again, and is counted. Through the pages, as a worker walks them."""
from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Assignment, Claim
from studies.models import Platform
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import answer, complete_task, entry_url, landing_form, start, task_of
from tests.annotations.platforms.mturk_stubs import published_as
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db
STATED = re.compile(r"(\d+) questions?\.")
SANDBOX = "https://workersandbox.mturk.com"


def stated(page) -> int:
    """The number of questions a landing page states."""
    return int(STATED.search(html.unescape(page.content.decode())).group(1))


def questions_of(url: str) -> int:
    """The questions the task of ``url`` asks ("Question 1 of N" counts its claims)."""
    return Claim.objects.filter(assignment=task_of(url)).count()


def done(client: Client, url: str) -> None:
    complete_task(client, url)
    assert client.post(url + "submit").status_code == 302
    assert task_of(url).status == Assignment.Status.SUBMITTED


def test_a_returning_worker_is_told_the_questions_of_their_next_task_without_the_checks_they_answered():
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    worker = Client()
    url = entry_url(study)
    assert stated(worker.get(url)) == 3  # 2 units and the check
    first = start(worker, url)
    assert questions_of(first) == 3
    done(worker, first)  # the check answered

    assert stated(worker.get(url)) == 2
    second = start(worker, url)
    assert questions_of(second) == 2
    assert "Question 1 of 2" in worker.get(second).content.decode()
    assert stated(Client().get(url)) == 3  # a new worker is still asked the check


def test_a_check_given_back_is_counted_again():
    """Left unanswered in a task the worker returned: asked again, so stated again."""
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    worker = Client()
    url = entry_url(study)
    first = start(worker, url)
    assert worker.post(first + "leave").status_code == 302  # nothing answered

    assert stated(worker.get(url)) == 3
    assert questions_of(start(worker, url)) == 3


def test_a_check_of_a_task_past_its_deadline_not_yet_expired_is_counted(monkeypatch):
    """The worker's earlier task is still active past its deadline (nothing expired it yet): the start
    expires it before it claims, so its unanswered check is asked again, and the landing page, which
    expires nothing, says so."""
    clock = clock_installed(monkeypatch, timezone.now())
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    worker = Client()
    url = entry_url(study)
    first = start(worker, url)
    answer(worker, first, "yes")
    clock.advance(days=1)
    assert task_of(first).status == Assignment.Status.ACTIVE

    assert stated(worker.get(url)) == 3
    second = start(worker, url)
    assert task_of(first).status == Assignment.Status.EXPIRED
    assert questions_of(second) == 3


def test_a_platform_workers_second_assignment_states_the_questions_it_will_ask(mturk):
    """An MTurk worker who did one assignment of the study opens another: its landing page, and the
    page shown again after a form sent without the box ticked, state the questions it will ask."""
    study = make_study(platform=Platform.MTURK, n_items=10, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    worker = Client()

    def url(assignment: str) -> str:
        return entry_url(study, assignmentId=assignment, hitId="3HIT", workerId="AWORKER1", turkSubmitTo=SANDBOX)

    first = start(worker, url("3FIRST"))
    assert questions_of(first) == 3
    done(worker, first)

    assert stated(worker.get(url("3SECOND"))) == 2
    form = landing_form(worker, url("3SECOND"))
    del form["consent"]
    again = worker.post(url("3SECOND"), form)
    assert again.status_code == 400 and stated(again) == 2
    assert questions_of(start(worker, url("3SECOND"))) == 2


def test_another_browser_typing_a_platform_workers_id_is_told_a_new_workers_count(mturk):
    """The worker id in a platform's URL is anyone's to type: a browser that does not prove it worked
    as that worker (the study's signed cookie) is told a new worker's count, on the page and when it
    is shown again, so the count never tells whether, or how far, someone else took part."""
    study = make_study(platform=Platform.MTURK, n_items=10, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")

    def url(worker_id: str, assignment: str) -> str:
        return entry_url(study, assignmentId=assignment, hitId="3HIT", workerId=worker_id, turkSubmitTo=SANDBOX)

    victim = Client()
    done(victim, start(victim, url("AVICTIM1", "3FIRST")))  # the check answered
    assert stated(victim.get(url("AVICTIM1", "3SECOND"))) == 2  # the worker's own browser: their count
    stranger = Client()
    assert stated(stranger.get(url("AVICTIM1", "3MADEUP1"))) == stated(stranger.get(url("ANOBODY1", "3MADEUP2"))) == 3
    form = landing_form(stranger, url("AVICTIM1", "3MADEUP1"))
    del form["consent"]
    again = stranger.post(url("AVICTIM1", "3MADEUP1"), form)
    assert again.status_code == 400 and stated(again) == 3
