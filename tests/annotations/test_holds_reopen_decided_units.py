"""A unit decided early (``Study.stop_when_decided``) on answers that sync later puts on hold: the
held answers stop counting, so sync checks the task's decided units again in the same transaction
(``stopping.units_after_hold``), as a release does: still decided, the unit stays closed; no longer
decided, it is reopened and offered again. The held claim keeps its slot (``n_claimed``) until a
researcher clears or rejects the work, and ``n_completed <= n_claimed <= quota`` holds throughout."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, PlatformSubmission, Unit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject, submission_clear
from annotations.services.platforms.sync import study_sync
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import (
    complete_assignment,
    publish_on,
    start_assignment,
    submitted,
)

pytestmark = pytest.mark.django_db

REASON = "The platform says another worker holds this task, so these answers cannot be accepted as theirs. " * 2


def one_unit_on_prolific(server):
    """A Prolific study of one unit (5 workers per unit) that stops when decided: (study, its Prolific
    study id)."""
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, status="draft", stop_when_decided=True)
    publication = publish_on(study, "prolific")  # publishing opens it (its units are built)
    return study, publication.prolific_study_id


def listed_work(study, server, prolific_id: str, worker: str, *, platform_worker: str | None = None) -> Assignment:
    """Work submitted here under a submission Prolific lists for ``platform_worker`` (the worker who
    answered here unless said otherwise: another worker is a mismatch that sync holds)."""
    row = server.add_submission(prolific_id, participant_id=platform_worker or worker)
    return submitted(study, platform="prolific", worker_id=worker, assignment_id=row["id"], task_id=prolific_id)


def counters(unit: Unit) -> tuple:
    unit.refresh_from_db()
    assert unit.n_completed <= unit.n_claimed <= unit.quota
    return unit.decided_at is not None, unit.quota, unit.n_claimed, unit.n_completed


def test_a_worker_mismatch_found_after_the_decision_reopens_the_unit_it_no_longer_decides(prolific):
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    listed_work(study, server, prolific_id, "p_honest_0")
    listed_work(study, server, prolific_id, "p_honest_1")
    impostor = listed_work(study, server, prolific_id, "p_fabricated", platform_worker="p_real")
    unit = Unit.objects.get(study=study)
    assert counters(unit) == (True, 3, 3, 3)  # three right answers of five decide it

    study_sync(study=study)

    assert PlatformSubmission.objects.get(assignment=impostor).flag == PlatformSubmission.Flag.WORKER_MISMATCH
    # Two counting answers of five no longer decide it: reopened; the held claim keeps its slot.
    assert counters(unit) == (False, 5, 3, 2)
    newcomer = start_assignment(study, platform="prolific", worker_id="p_new", assignment_id="new-session",
                                task_id=prolific_id)
    assert newcomer.claims.filter(unit=unit).exists()  # offered again
    assert counters(unit) == (False, 5, 4, 2)

    assignment_reject(user=OPERATOR, study=study, assignment=impostor, feedback=REASON)
    assert counters(unit) == (False, 5, 3, 2)  # the rejection frees the held slot

    complete_assignment(newcomer)
    assert counters(unit) == (True, 3, 3, 3)  # decided again by the new third answer


def test_work_prolific_never_listed_reopens_the_unit_it_decided(prolific, settings):
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    listed_work(study, server, prolific_id, "p_honest_0")
    listed_work(study, server, prolific_id, "p_honest_1")
    invented = submitted(study, platform="prolific", worker_id="p_invented", assignment_id="invented-session",
                         task_id=prolific_id)
    unit = Unit.objects.get(study=study)
    assert counters(unit) == (True, 3, 3, 3)

    study_sync(study=study)

    held = PlatformSubmission.objects.get(assignment=invented)
    assert held.flag == PlatformSubmission.Flag.NOT_ON_PLATFORM
    assert counters(unit) == (False, 5, 3, 2)

    submission_clear(user=OPERATOR, submission=held)  # the researcher accepts it: it counts and decides again
    assert counters(unit) == (True, 3, 3, 3)
    study_sync(study=study)  # still unlisted but cleared: nothing changes
    assert counters(unit) == (True, 3, 3, 3)


def test_a_hold_that_leaves_the_unit_decided_keeps_it_closed(prolific):
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    rows = [server.add_submission(prolific_id, participant_id=f"p_{n}") for n in range(3)]
    rows.append(server.add_submission(prolific_id, participant_id="p_real"))
    workers = ["p_0", "p_1", "p_2", "p_fabricated"]
    tasks = [start_assignment(study, platform="prolific", worker_id=worker, assignment_id=row["id"],
                              task_id=prolific_id) for worker, row in zip(workers, rows, strict=True)]
    for task in tasks[:3]:
        complete_assignment(task)
    unit = Unit.objects.get(study=study)
    assert counters(unit) == (True, 4, 4, 3)  # decided with a fourth claim still held
    decided_at = unit.decided_at
    complete_assignment(tasks[3])
    assert counters(unit) == (True, 4, 4, 4)

    study_sync(study=study)

    assert PlatformSubmission.objects.get(assignment=tasks[3]).flag == PlatformSubmission.Flag.WORKER_MISMATCH
    assert counters(unit) == (True, 4, 4, 3)  # three counting answers still decide it: closed
    assert unit.decided_at == decided_at


def test_work_prolific_lists_late_counts_again_and_decides_the_unit_it_reopened(prolific, settings):
    """The hold lifts without a researcher: Prolific lists the session after all. The work counts
    again in the same sync, and the unit it had decided is decided again there, not only at the
    next submit or clear."""
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    listed_work(study, server, prolific_id, "p_honest_0")
    listed_work(study, server, prolific_id, "p_honest_1")
    late = submitted(study, platform="prolific", worker_id="p_late", assignment_id="late-session",
                     task_id=prolific_id)
    unit = Unit.objects.get(study=study)
    study_sync(study=study)
    assert PlatformSubmission.objects.get(assignment=late).flag == PlatformSubmission.Flag.NOT_ON_PLATFORM
    assert counters(unit) == (False, 5, 3, 2)

    server.add_submission(prolific_id, participant_id="p_late", submission_id="late-session")
    study_sync(study=study)

    assert PlatformSubmission.objects.get(assignment=late).flag == PlatformSubmission.Flag.OK
    assert counters(unit) == (True, 3, 3, 3)


def test_a_new_reason_to_hold_is_not_covered_by_the_clear_of_the_old_one(prolific, settings):
    """A researcher cleared work Prolific did not list; Prolific then lists the session for another
    participant. That is a worker mismatch, a new reason the clear never saw: the work is held
    again, and stops counting."""
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    work = submitted(study, platform="prolific", worker_id="p_answered", assignment_id="late-session",
                     task_id=prolific_id)
    unit = Unit.objects.get(study=study)
    study_sync(study=study)
    held = PlatformSubmission.objects.get(assignment=work)
    submission_clear(user=OPERATOR, submission=held)
    assert counters(unit)[3] == 1  # cleared: it counts

    server.add_submission(prolific_id, participant_id="p_someone_else", submission_id="late-session")
    study_sync(study=study)

    held.refresh_from_db()
    assert held.flag == PlatformSubmission.Flag.WORKER_MISMATCH and held.cleared_at is None
    assert counters(unit)[3] == 0  # held again: it does not count
