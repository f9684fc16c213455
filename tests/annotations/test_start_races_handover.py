"""A task start racing the study's handover to a researcher who blocked the worker leaves the blocked
worker no task in progress. A researcher's block covers the studies they own, and the handover
(``studies.services.studies.study_update``, which locks the study's row ``FOR UPDATE``) ends the
tasks in progress of the workers the new owner blocked (``platforms.blocks.blocks_end_tasks_in_study``).
The start reads the worker's blocks with the owner of the study it loaded (``selectors.participant_blocked``),
then reads the study's row again under its ``FOR KEY SHARE`` lock (``assignment._qualification_pending``,
``precompiled.study_lock_read``), owner included, and reads the blocks again when the owner changed:
a start that loaded the study before the handover and made its task after it is refused. Before,
the owner was read only from the loaded study: the start passed the old owner's blocks, made its task
after the handover's sweep, and the blocked worker kept a live task in the new owner's study.

The probe with no threads runs on SQLite and PostgreSQL; the races are played with threads on their
own connections on PostgreSQL (``DATABASE_URL=postgres://...``; skipped on SQLite, which serialises
writes)."""
from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from annotations import precompiled
from annotations.models import Assignment
from annotations.services import assignment as assignment_service
from annotations.services.assignment import assignment_start
from annotations.services.errors import ParticipantBlocked
from annotations.services.platforms import blocks as blocks_service
from annotations.services.platforms.blocks import worker_block
from studies.models import Study
from studies.services.studies import study_update
from tests.annotations.factories import ParticipantFactory
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

on_postgres = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (set DATABASE_URL)")


def _blocked_by_alice():
    """Alice blocked worker pcopier01 in her study; Bob's study is not covered by her block (yet)."""
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    s1 = open_utility_study(name="alice-1", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    s2 = open_utility_study(name="bob-1", owner=bob, n_items=6, n_sources=1, quota=2, units_per_task=2)
    participant = work(s1, "pcopier01", steps=1, submit=False).participant  # took part: the block finds them
    worker_block(user=alice, study=s1, participant=participant, reason="Copied answers.")
    return alice, bob, s2, participant


def _active(study, participant) -> list[int]:
    return list(Assignment.objects.filter(study=study, participant=participant, status=Assignment.Status.ACTIVE)
                .values_list("id", flat=True))


@pytest.mark.django_db
def test_a_start_with_the_study_read_before_a_handover_is_refused():
    alice, bob, s2, participant = _blocked_by_alice()
    page_study = Study.objects.get(pk=s2.pk)  # the start's page read the study, Bob's then
    study_update(study=s2, user=bob, owner=alice)

    with pytest.raises(ParticipantBlocked):
        assignment_start(study=page_study, participant=participant)
    assert _active(s2, participant) == []
    with pytest.raises(ParticipantBlocked):  # as a start with the study read now
        assignment_start(study=Study.objects.get(pk=s2.pk), participant=participant)


@pytest.mark.django_db
def test_the_claims_locked_read_gives_the_owner_as_saved_and_the_usual_start_no_more_statements():
    alice, bob, s2, participant = _blocked_by_alice()
    page_study = Study.objects.get(pk=s2.pk)
    Study.objects.filter(pk=s2.pk).update(owner=alice)  # behind the loaded object's back
    with transaction.atomic():
        assert precompiled.study_lock_read(study_id=s2.pk, participant_id=participant.pk) == ("open", None, alice.pk)
    assert precompiled.study_lock_read(study_id=0, participant_id=participant.pk) == (None, None, None)
    Study.objects.filter(pk=s2.pk).update(owner=bob)
    honest = ParticipantFactory()  # blocked by no one
    with transaction.atomic(), CaptureQueriesContext(connection) as same:
        assert assignment_service._qualification_pending(study=page_study, participant=honest) is False
    Study.objects.filter(pk=s2.pk).update(owner=alice)
    with transaction.atomic(), CaptureQueriesContext(connection) as changed:
        assert assignment_service._qualification_pending(study=page_study, participant=honest) is False
    assert len(changed.captured_queries) == len(same.captured_queries) + 1  # the blocks, read with the new owner


@pytest.mark.postgres
@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_start_waiting_on_a_handover_that_commits_is_refused(monkeypatch):
    """The handover holds the study's row (its sweep ran, found no task, not yet committed) when a
    start whose page read the study before it runs: the start passes the old owner's blocks, waits
    for the row at its claim's lock, then reads the new owner there and is refused."""
    alice, bob, s2, participant = _blocked_by_alice()
    page_study = Study.objects.get(pk=s2.pk)
    reached, release = paused_after(blocks_service, "blocks_end_tasks_in_study", monkeypatch)
    handover = Step(lambda: study_update(study=s2, user=bob, owner=alice))
    handover.start()
    assert reached.wait(WAIT)  # the study's row locked FOR UPDATE, its tasks swept, not yet committed
    started = Step(lambda: assignment_start(study=page_study, participant=participant))
    started.start()
    try:
        assert waits_on_a_lock(started), "the start did not wait for the handover"
    finally:
        release.set()
    handover.outcome()
    with pytest.raises(ParticipantBlocked):
        started.outcome()
    assert Study.objects.get(pk=s2.pk).owner_id == alice.pk
    assert _active(s2, participant) == []


@pytest.mark.postgres
@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_handover_committing_between_the_starts_block_check_and_its_lock_refuses_the_start(monkeypatch):
    alice, bob, s2, participant = _blocked_by_alice()
    page_study = Study.objects.get(pk=s2.pk)
    qualification_pending = assignment_service._qualification_pending
    handover = Step(lambda: study_update(study=s2, user=bob, owner=alice))

    def handover_meanwhile(**kwargs):
        # after the start's block check (old owner), before its study lock: the handover commits
        handover.start()
        handover.outcome()
        return qualification_pending(**kwargs)

    monkeypatch.setattr(assignment_service, "_qualification_pending", handover_meanwhile)
    started = Step(lambda: assignment_start(study=page_study, participant=participant))
    started.start()
    with pytest.raises(ParticipantBlocked):
        started.outcome()
    assert Study.objects.get(pk=s2.pk).owner_id == alice.pk
    assert _active(s2, participant) == []


@pytest.mark.postgres
@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_handover_after_the_starts_lock_waits_for_its_task_and_ends_it(monkeypatch):
    alice, bob, s2, participant = _blocked_by_alice()
    page_study = Study.objects.get(pk=s2.pk)
    qualification_pending = assignment_service._qualification_pending
    handover = Step(lambda: study_update(study=s2, user=bob, owner=alice))

    def handover_after_the_lock(**kwargs):
        pending = qualification_pending(**kwargs)  # the study's row locked FOR KEY SHARE, old owner read
        handover.start()
        assert waits_on_a_lock(handover), "the handover did not wait for the start"
        return pending

    monkeypatch.setattr(assignment_service, "_qualification_pending", handover_after_the_lock)
    started = Step(lambda: assignment_start(study=page_study, participant=participant))
    started.start()
    task = started.outcome()  # the start makes its task ...
    handover.outcome()  # ... and the handover, after it, ends it
    ended = Assignment.objects.get(pk=task.pk)
    assert (ended.status, ended.ended_by_researcher) == (Assignment.Status.RETURNED, True)
    assert _active(s2, participant) == []
