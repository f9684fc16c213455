"""The first-answer window counts from the worker's consent, not from the task's creation: a task
made before its worker consented shows the instructions and the worked example on its consent
page, and a worker who read them for longer than the window (10 minutes for a 6-minute study)
lost the task without being told. A task nobody works on still gives its slots back."""
from __future__ import annotations

from datetime import timedelta

import pytest

from annotations.models import Annotation, Assignment, Unit
from annotations.services.assignment import assignment_start
from annotations.services.deadlines import assignment_duration, first_answer_window
from annotations.services.release import assignment_expire_stale
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.pages import form_fields
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch)


def _study():
    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2, estimated_minutes_per_task=6)
    assert first_answer_window(study) == timedelta(minutes=10)
    return study


def _unconsented_task(study) -> Assignment:
    """A task made before its worker consented: its page asks for consent, with the instructions."""
    return assignment_start(study=study, participant=ParticipantFactory())


def test_a_worker_who_consents_at_minute_9_and_answers_at_minute_12_keeps_the_task(client, clock):
    study = _study()
    assignment = _unconsented_task(study)
    task = f"/w/a/{assignment.token}/"
    page = client.get(task).content.decode()
    assert 'action="' + task + 'consent"' in page and 'id="instructions"' in page

    clock.advance(9)  # reading the instructions and the example
    assert client.post(task + "consent", {"consent": "yes"}).status_code == 302
    clock.advance(3)  # minute 12: past the window counted from the task's creation
    assert assignment_expire_stale(now=clock.now) == 0
    fields = form_fields(client.get(task).content.decode())
    response = client.post(task + "answer", {**fields, "answer": "yes"})

    assert response.status_code == 302, response.content.decode()[:300]
    assert Annotation.objects.filter(claim__assignment=assignment).count() == 1
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.ACTIVE
    assert assignment.expires_at == assignment.created_at + assignment_duration(study)  # the first answer extends it


def test_the_window_from_consent_expires_a_worker_who_never_answers(client, clock):
    study = _study()
    assignment = _unconsented_task(study)
    task = f"/w/a/{assignment.token}/"
    clock.advance(9)
    client.post(task + "consent", {"consent": "yes"})
    assignment.refresh_from_db()
    assert assignment.expires_at == assignment.consented_at + first_answer_window(study)

    assert assignment_expire_stale(now=assignment.consented_at + first_answer_window(study) - MINUTE) == 0
    assert assignment_expire_stale(now=assignment.consented_at + first_answer_window(study) + MINUTE) == 1
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.EXPIRED
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == {0}


def test_a_no_show_still_expires_after_the_window(client, clock):
    study = _study()
    assignment = _unconsented_task(study)
    clock.advance(11)
    assert "has expired" in client.get(f"/w/a/{assignment.token}/").content.decode()
    response = client.post(f"/w/a/{assignment.token}/consent", {"consent": "yes"})
    assert response.status_code == 410  # too late to consent: the task is gone
    assert assignment_expire_stale(now=clock.now) == 1
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == {0}


def test_consent_never_moves_the_deadline_past_the_full_duration(client, clock, settings):
    settings.RL_FIRST_ANSWER_MINUTES = 25  # the full duration is 30 minutes (4 x 6, at least 30)
    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2, estimated_minutes_per_task=6)
    assignment = _unconsented_task(study)
    clock.advance(20)
    client.post(f"/w/a/{assignment.token}/consent", {"consent": "yes"})
    assignment.refresh_from_db()
    assert assignment.expires_at == assignment.created_at + assignment_duration(study)


def test_a_worker_who_consents_on_entry_gets_the_window_from_then(client, clock):
    """The usual way in: consent on the landing page makes the task, so consent and creation are
    one moment and nothing changes."""
    study = _study()
    assignment = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    assert assignment.consented_at == assignment.created_at
    assert assignment.expires_at == assignment.created_at + first_answer_window(study)
