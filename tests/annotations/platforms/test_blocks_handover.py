"""A researcher's block covers the studies they own (``selectors.blocks_covering`` reads a study's
owner as it is now), so a study handed to them comes under their earlier blocks: at the handover
(``studies.services.studies.study_update``, ``studies.signals.study_owner_changed``) the tasks in
progress of the workers they blocked end there as the block ended their tasks in the studies it
covered when it was made (``platforms.blocks.blocks_end_tasks_in_study``). Before, such a task
outlived the block: its answers and submit were taken and counted. State built through the services,
as a researcher and a worker reach it."""
from __future__ import annotations

from datetime import timedelta

import pytest

from annotations.models import Assignment, Claim, Unit
from annotations.selectors import participant_blocked
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.errors import AssignmentNotActive
from annotations.services.platforms.blocks import worker_block
from studies.services.studies import study_update
from tests.clock import clock_installed
from tests.cockpit.conftest import staff_client
from tests.work import gold_after, open_utility_study, work

pytestmark = pytest.mark.django_db


def _studies():
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    return (alice, bob,
            open_utility_study(name="alice-1", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2),
            open_utility_study(name="bob-1", owner=bob, n_items=6, n_sources=1, quota=2, units_per_task=2))


def test_a_study_handed_to_a_researcher_ends_the_tasks_of_the_workers_they_blocked():
    alice, bob, s1, s2 = _studies()
    t1 = work(s1, "pcopier01", steps=1, submit=False)
    t2 = work(s2, "pcopier01", steps=1, submit=False)
    other = work(s2, "phonest01", steps=1, submit=False)  # not blocked by anyone
    worker_block(user=alice, study=s1, participant=t1.participant, reason="Copied answers.")
    assert Assignment.objects.get(pk=t1.pk).status == Assignment.Status.RETURNED
    assert Assignment.objects.get(pk=t2.pk).status == Assignment.Status.ACTIVE  # Bob's study: not covered yet

    study_update(study=s2, user=bob, owner=alice)

    assert participant_blocked(participant=t2.participant, study=s2)
    ended = Assignment.objects.get(pk=t2.pk)
    assert (ended.status, ended.ended_by_researcher) == (Assignment.Status.RETURNED, True)
    assert not Claim.objects.filter(assignment=t2, released=False).exists()  # its units back in the pool
    claim = t2.claims.order_by("position").first()
    with pytest.raises(AssignmentNotActive):
        annotation_submit(assignment=t2, claim=claim, step="after", answer=gold_after(claim, "after"))
    with pytest.raises(AssignmentNotActive):
        assignment_submit(assignment=t2)
    assert not Unit.objects.filter(study=s2, n_completed__gt=0).exists()
    assert Assignment.objects.get(pk=other.pk).status == Assignment.Status.ACTIVE  # no block covers them


def test_a_task_past_its_deadline_at_the_handover_ends_expired_as_the_sweep_would(monkeypatch):
    alice, bob, s1, s2 = _studies()
    t1 = work(s1, "plate0001", steps=1, submit=False)
    worker_block(user=alice, study=s1, participant=t1.participant, reason="Copied answers.")
    t2 = work(s2, "plate0001", steps=1, submit=False)  # Bob's study: the block does not refuse it
    clock = clock_installed(monkeypatch)
    clock.now = Assignment.objects.get(pk=t2.pk).expires_at + timedelta(seconds=1)

    study_update(study=s2, user=bob, owner=alice)

    ended = Assignment.objects.get(pk=t2.pk)
    assert (ended.status, ended.ended_by_researcher) == (Assignment.Status.EXPIRED, False)
    assert not Claim.objects.filter(assignment=t2, released=False).exists()
