"""Deadlines: a task nobody works on gives its slots back early (issue 10 item 12: orphaned
assignments of lost consent responses held 24 of 200 slots for the full 30 minutes)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from annotations.models import Assignment, Unit
from annotations.services.answers import annotation_submit
from annotations.services.assignment import assignment_start
from annotations.services.deadlines import assignment_duration, first_answer_window
from annotations.services.qualification import qualification_submit
from annotations.services.release import assignment_expire_stale
from tests.annotations.factories import ParticipantFactory, add_qualification, make_study

pytestmark = pytest.mark.django_db
SECOND = timedelta(seconds=1)


def test_a_task_with_no_answer_gives_its_slots_back_well_before_the_full_deadline():
    study = make_study(n_items=3, n_sources=1, quota=1, units_per_task=3)
    orphans = [assignment_start(study=study, participant=ParticipantFactory(), consented=True)]
    assert sum(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == 3
    window, full = first_answer_window(study), assignment_duration(study)
    assert window <= full / 2
    assert abs(orphans[0].expires_at - (orphans[0].created_at + window)) < SECOND
    assert assignment_expire_stale(now=orphans[0].created_at + window + SECOND) == 1
    assert Assignment.objects.get(pk=orphans[0].pk).status == Assignment.Status.EXPIRED
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == {0}
    fresh = assignment_start(study=study, participant=ParticipantFactory())
    assert fresh.claims.filter(unit__isnull=False).count() == 3


def test_the_first_answer_extends_the_deadline_to_the_full_duration():
    study = make_study(n_items=3, n_sources=1, quota=1, units_per_task=2)
    assignment = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    claim = assignment.claims.filter(unit__isnull=False).select_related("unit__item").first()
    annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    assignment.refresh_from_db()
    assert assignment.expires_at == assignment.created_at + assignment_duration(study)
    assert assignment_expire_stale(now=assignment.created_at + first_answer_window(study) + SECOND) == 0
    assert assignment_expire_stale(now=assignment.expires_at + SECOND) == 1


def test_a_passed_qualification_test_extends_the_deadline():
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=2)
    test = add_qualification(study, pass_mark=2)
    assignment = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    answers = {str(q.pk): q.correct_answer for q in test.questions.all()}
    assert qualification_submit(assignment=assignment, answers=answers).passed
    assignment.refresh_from_db()
    assert assignment.expires_at == assignment.created_at + assignment_duration(study)


def test_the_first_answer_window_is_a_setting(settings):
    settings.RL_FIRST_ANSWER_MINUTES = 3  # read when the study opens (test_deadlines_fixed_at_opening)
    assert first_answer_window(make_study(n_items=1, n_sources=1)) == timedelta(minutes=3)
    settings.RL_FIRST_ANSWER_MINUTES = 10_000  # never beyond the full duration
    study = make_study(n_items=1, n_sources=1)
    assert first_answer_window(study) == assignment_duration(study)


def test_the_expiry_task_declares_no_retry_it_does_not_do():
    """Issue 11: the task set ``max_retries`` and ``retry_backoff`` without ``autoretry_for``, so
    they did nothing. The next beat run is its retry."""
    from annotations.tasks.assignments import expire_stale_assignments

    assert not getattr(expire_stale_assignments, "autoretry_for", ())
    assert not getattr(expire_stale_assignments, "retry_backoff", False)
    assert expire_stale_assignments.acks_late
