"""The time a question's page says it was shown (its signed ``shown`` field, ``selectors.shown_token``)
is the moment the question became the one the task asks (``selectors.step_current_since``), on every
display: a reload (a phone restoring a tab) does not restart the answer's ``duration_ms``, which the
speeder rules and the pay reading read. Walked through the worker pages with the test clock."""
from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Annotation, Assignment, QualificationQuestion
from annotations.selectors import shown_at_from_token
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, form_fields, start
from tests.clock import Clock, clock_installed

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch, timezone.now().replace(hour=12, minute=0, second=30, microsecond=0))


def _answer(client: Client, task: str, fields: dict) -> Annotation:
    response = client.post(task + "answer", {**fields, "answer": "yes"})
    assert response.status_code == 302, response.content.decode()[:500]
    return Annotation.objects.order_by("-pk").first()


def test_a_reload_of_the_first_question_keeps_the_time_it_was_shown(clock):
    client = Client()
    task = start(client, entry_url(make_study(units_per_task=2)))
    consented = clock.now
    first = form_fields(client.get(task).content.decode())
    clock.advance(seconds=60)  # reading the question for a minute
    again = form_fields(client.get(task).content.decode())  # the page reloads
    assert again["step"] == first["step"] == "before"
    clock.advance(seconds=2)
    answer = _answer(client, task, again)
    assert (answer.shown_at, answer.duration_ms) == (consented, 62_000)


def test_a_reload_of_a_later_question_counts_from_the_answer_before_it(clock):
    client = Client()
    task = start(client, entry_url(make_study(units_per_task=2)))
    for _step in ("before", "after"):  # the first question, answered at once
        clock.advance(seconds=3)
        _answer(client, task, form_fields(client.get(task).content.decode()))
    completed = clock.now
    client.get(task)  # the second question, shown
    clock.advance(seconds=30)
    fields = form_fields(client.get(task).content.decode())  # reloaded
    clock.advance(seconds=4)
    answer = _answer(client, task, fields)
    assert (answer.step, answer.shown_at, answer.duration_ms) == ("before", completed, 34_000)


def test_a_reload_of_the_explanation_counts_from_the_first_answer(clock):
    client = Client()
    task = start(client, entry_url(make_study(units_per_task=2)))
    clock.advance(seconds=5)
    before = _answer(client, task, form_fields(client.get(task).content.decode()))
    client.get(task)  # the explanation, shown
    clock.advance(seconds=60)  # reading the rationale for a minute
    fields = form_fields(client.get(task).content.decode())  # the page reloads
    assert fields["step"] == "after"
    clock.advance(seconds=2)
    answer = _answer(client, task, fields)
    assert (answer.step, answer.shown_at, answer.duration_ms) == ("after", before.answered_at, 62_000)


class _TickingClock(Clock):
    """A clock that moves a millisecond on at each read, as a request's reads of the time differ."""

    def __call__(self):
        self.advance(seconds=0.001)
        return self.now


def test_the_explanation_sent_with_the_first_answer_shows_the_time_a_reload_shows(monkeypatch):
    monkeypatch.setattr(timezone, "now", _TickingClock(timezone.now().replace(microsecond=0)))
    client = Client()
    task = start(client, entry_url(make_study(units_per_task=2)))
    first = form_fields(client.get(task).content.decode())
    reply = client.post(task + "answer", {**first, "answer": "yes"}, HTTP_X_RL_INLINE="1")
    assert reply.status_code == 200, reply.content.decode()[:500]
    inline = form_fields(reply.content.decode())
    reloaded = form_fields(client.get(task).content.decode())
    before = Annotation.objects.get(step="before")
    claim = before.claim_id
    assert inline["step"] == reloaded["step"] == "after" and int(inline["claim"]) == claim
    assert shown_at_from_token(inline["shown"], claim_id=claim, step="after") == before.answered_at
    assert shown_at_from_token(reloaded["shown"], claim_id=claim, step="after") == before.answered_at


def test_without_reloads_each_answer_takes_the_time_its_page_was_shown(clock):
    client = Client()
    task = start(client, entry_url(make_study(units_per_task=3)))
    waits = [5, 7, 11, 13, 17, 19]
    for wait in waits:
        fields = form_fields(client.get(task).content.decode())
        clock.advance(seconds=wait)
        _answer(client, task, fields)
    assert 'name="claim"' not in client.get(task).content.decode()
    assert list(Annotation.objects.order_by("pk").values_list("duration_ms", flat=True)) == [w * 1000 for w in waits]


def test_the_qualification_test_before_the_first_question_is_not_its_time(clock):
    study = make_study(units_per_task=2)
    add_qualification(study)
    client = Client()
    task = start(client, entry_url(study))
    assert 'name="claim"' not in client.get(task).content.decode()  # the test's page
    clock.advance(seconds=90)  # taking the test
    answers = {f"q_{q.pk}": q.correct_answer for q in QualificationQuestion.objects.filter(test__study=study)}
    assert client.post(task + "qualification", answers).status_code == 302
    assert not Assignment.objects.get().qualification_pending
    passed = clock.now
    client.get(task)  # the first question
    clock.advance(seconds=20)
    fields = form_fields(client.get(task).content.decode())  # reloaded
    clock.advance(seconds=4)
    answer = _answer(client, task, fields)
    assert (answer.shown_at, answer.duration_ms) == (passed, 24_000)
