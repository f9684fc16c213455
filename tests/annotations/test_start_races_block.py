"""A task start racing a researcher's block of the worker leaves the blocked worker no task in
progress, on PostgreSQL (READ COMMITTED). The start reads whether the worker is blocked under a
``FOR NO KEY UPDATE`` lock of the worker's row (``selectors.participant_blocked``, ``lock``); the
block (``platforms.blocks.worker_block``) now locks that row before it writes, so a block made
after the start's read waits for the start's task and ends it. Before, the block's insert took only
``FOR KEY SHARE`` on the row (its foreign key), which the start's lock does not stop: the block
committed first, its end of the tasks in progress could not see the start's uncommitted task, and
the blocked worker kept a live new task.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import pytest
from django.db import connection

from annotations.models import Assignment, WorkerBlock
from annotations.services import assignment as assignment_service
from annotations.services.assignment import assignment_start
from annotations.services.errors import ParticipantBlocked
from annotations.services.platforms import blocks as blocks_service
from annotations.services.platforms.blocks import worker_block
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def test_a_block_committing_between_the_starts_check_and_its_insert_leaves_no_task_in_progress(monkeypatch):
    alice, _ = staff_client("alice")
    study = open_utility_study(name="alice-1", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    participant = work(study, "pblocked1").participant  # took part: the block finds them
    qualification_pending = assignment_service._qualification_pending
    block = Step(lambda: worker_block(user=alice, study=study, participant=participant, reason="Copied answers."))

    def block_meanwhile(**kwargs):
        # after the start's blocked check, before its insert: the block runs on its own connection
        block.start()
        waits_on_a_lock(block)  # fixed: it waits for this start's row lock; before: it committed
        return qualification_pending(**kwargs)

    monkeypatch.setattr(assignment_service, "_qualification_pending", block_meanwhile)
    started = Step(lambda: assignment_start(study=study, participant=participant))
    started.start()
    started.outcome()  # the start goes on (its task is made) ...
    block.outcome()  # ... and the block, after it, ends it

    assert WorkerBlock.objects.filter(participant=participant).count() == 1
    active = list(Assignment.objects.filter(participant=participant, status=Assignment.Status.ACTIVE)
                  .values_list("id", "ended_by_researcher"))
    assert active == [], active
    assert Assignment.objects.filter(participant=participant, ended_by_researcher=True).count() == 1
    monkeypatch.setattr(assignment_service, "_qualification_pending", qualification_pending)
    with pytest.raises(ParticipantBlocked):
        assignment_start(study=study, participant=participant)


def test_a_start_while_the_block_holds_the_worker_waits_and_leaves_no_task_in_progress(monkeypatch):
    alice, _ = staff_client("alice")
    study = open_utility_study(name="alice-1", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    participant = work(study, "pblocked1").participant
    reached, release = paused_after(blocks_service, "_tasks_in_progress_end", monkeypatch)
    block = Step(lambda: worker_block(user=alice, study=study, participant=participant, reason="Copied answers."))
    block.start()
    assert reached.wait(WAIT)  # the block holds the worker's row, its tasks ended, not yet committed
    started = Step(lambda: assignment_start(study=study, participant=participant))
    started.start()
    try:
        assert waits_on_a_lock(started), "the start did not wait for the block"
    finally:
        release.set()
    block.outcome()
    try:
        started.outcome()
    except ParticipantBlocked:
        pass
    active = list(Assignment.objects.filter(participant=participant, status=Assignment.Status.ACTIVE)
                  .values_list("id", flat=True))
    assert active == [], active
