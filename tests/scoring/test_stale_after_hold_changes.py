"""A unit's exported scores are stale once the answers that count changed after its run, even when
their number did not: sync holding one task after the run while another task's hold ends (a
researcher clears it, or the platform lists it after all) leaves the count the same, so the times of
the holds' changes (``PlatformSubmission.flagged_at`` and ``cleared_at``) are read too
(``scoring.selectors.unit_counting_changes``), of work that counted or could have: sync holding a
returned task never counted changes nothing. The changes are compared with when the run began reading
the answers (``scoring.selectors.score_run_read_at``), not with when it finished: a change while it
computed is dated before it finished, yet missing from it."""
from __future__ import annotations

import pytest

from annotations.models import PlatformSubmission
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_reject, submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.services.release import assignment_return
from scoring.api.export_units import SCORE_COLUMNS, score_rows
from scoring.models import UnitScore
from scoring.selectors import score_run_read_at, study_counting_changed_at
from scoring.services import score as score_service
from scoring.services import study_score
from scoring.services.bundle.export import scores_staleness
from tests.annotations.platforms.conftest import prolific, prolific_server, start_assignment  # noqa: F401
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db

Flag = PlatformSubmission.Flag
REJECTION = "These answers were given without reading the question, so they cannot be accepted. " * 2


def unit_row(study) -> dict:
    names = [c.name for c in SCORE_COLUMNS]
    (row,) = [dict(zip(names, row, strict=True)) for row in score_rows(UnitScore.objects.filter(study=study), user=None)]
    return row


def one_unit_on_prolific(name: str):
    """An open utility study of one unit (three workers), published on the fake Prolific server:
    (study, Prolific study id)."""
    study = open_utility_study(name=name, n_items=1, n_sources=1, quota=3, gold="yes")
    return study, study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id


def answered(study, pid: str, *, worker: str, session: str):
    """``worker`` answers (wrong before, right after) and submits under the Prolific ``session``."""
    task = start_assignment(study, platform="prolific", worker_id=worker, assignment_id=session, task_id=pid)
    for claim in task.claims.all():
        for step in ("before", "after"):
            annotation_submit(assignment=task, claim=claim, step=step, answer="no" if step == "before" else "yes")
    return assignment_submit(assignment=task)


def score(study):
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    return run


def test_a_hold_set_on_one_task_and_cleared_on_another_after_the_run_make_the_unit_stale(prolific, settings):  # noqa: F811
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, pid = one_unit_on_prolific("hold-swap-cleared")
    honest = server.add_submission(pid, participant_id="p_honest")
    answered(study, pid, worker="p_honest", session=honest["id"])
    taken = server.add_submission(pid, participant_id="p_real")
    answered(study, pid, worker="p_fabricated", session=taken["id"])  # Prolific says p_real holds it
    study_sync(study=study)
    mismatch = PlatformSubmission.objects.get(platform_assignment_id=taken["id"])
    assert mismatch.flag == Flag.WORKER_MISMATCH and mismatch.flagged_at is not None
    answered(study, pid, worker="p_invented", session="invented-session")  # not synced before the run
    run = score(study)
    assert (unit_row(study)["n_annotators"], unit_row(study)["stale"]) == (2, False)

    submission_clear(user=OPERATOR, submission=mismatch)  # counts again: 3
    study_sync(study=study)  # holds the session Prolific never listed: 2 again

    unlisted = PlatformSubmission.objects.get(platform_assignment_id="invented-session")
    assert unlisted.flag == Flag.NOT_ON_PLATFORM and unlisted.flagged_at > run.finished_at
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (run.pk, 2, True)

    study_sync(study=study)  # the flags stay: their times stay
    assert PlatformSubmission.objects.get(pk=unlisted.pk).flagged_at == unlisted.flagged_at
    assert PlatformSubmission.objects.get(pk=mismatch.pk).flagged_at == mismatch.flagged_at

    again = score(study)
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (again.pk, 2, False)


def test_a_hold_set_on_one_task_and_lifted_by_the_platform_on_another_after_the_run_make_the_unit_stale(
        prolific, settings):  # noqa: F811
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, pid = one_unit_on_prolific("hold-swap-listed")
    honest = server.add_submission(pid, participant_id="p_honest")
    answered(study, pid, worker="p_honest", session=honest["id"])
    answered(study, pid, worker="p_late", session="late-session")
    study_sync(study=study)  # Prolific does not list it yet: held
    assert PlatformSubmission.objects.get(platform_assignment_id="late-session").flag == Flag.NOT_ON_PLATFORM
    answered(study, pid, worker="p_invented", session="invented-session")  # not synced before the run
    run = score(study)
    assert (unit_row(study)["n_annotators"], unit_row(study)["stale"]) == (2, False)

    server.add_submission(pid, participant_id="p_late", submission_id="late-session")  # listed after all
    study_sync(study=study)  # the late one counts again, the invented one is held: 2 still

    late = PlatformSubmission.objects.get(platform_assignment_id="late-session")
    assert late.flag == Flag.OK and late.flagged_at > run.finished_at
    assert PlatformSubmission.objects.get(platform_assignment_id="invented-session").flag == Flag.NOT_ON_PLATFORM
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (run.pk, 2, True)


def test_sync_holding_a_returned_task_after_the_run_leaves_the_unit_and_the_study_fresh(prolific, settings):  # noqa: F811
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, pid = one_unit_on_prolific("hold-returned")
    for worker in ("p_one", "p_two"):
        listed = server.add_submission(pid, participant_id=worker)
        answered(study, pid, worker=worker, session=listed["id"])
    study_sync(study=study)
    run = score(study)
    assert (unit_row(study)["n_annotators"], unit_row(study)["stale"]) == (2, False)
    counted_changed_at = study_counting_changed_at(study=study)

    gone = server.add_submission(pid, participant_id="p_gone")  # Prolific lists it as submitted
    task = start_assignment(study, platform="prolific", worker_id="p_gone", assignment_id=gone["id"], task_id=pid)
    for claim in task.claims.all():
        for step in ("before", "after"):
            annotation_submit(assignment=task, claim=claim, step=step, answer="yes")
    assignment_return(assignment=task)  # answered but returned here: never counted
    study_sync(study=study)

    held = PlatformSubmission.objects.get(platform_assignment_id=gone["id"])
    assert held.flag == Flag.NOT_SUBMITTED_HERE and held.flagged_at > run.finished_at
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (run.pk, 2, False)
    assert study_counting_changed_at(study=study) == counted_changed_at


def test_a_task_rejected_and_another_submitted_while_the_run_reads_its_answers_make_the_unit_stale(
        prolific, monkeypatch):  # noqa: F811
    """The run reads the answers first and finishes later: one counted task rejected and another
    worker's task submitted between leave the unit's count at 3, dated before the run finished, yet
    the run aggregated the rejected answers and not the new ones."""
    _platform, server = prolific
    study, pid = one_unit_on_prolific("swap-mid-run")
    tasks = [answered(study, pid, worker=worker, session=server.add_submission(pid, participant_id=worker)["id"])
             for worker in ("p_one", "p_two", "p_three")]
    read_answers = score_service._annotation_frame

    def one_rejected_and_another_submitted_meanwhile(*args, **kwargs):  # the answers are read already
        answers = read_answers(*args, **kwargs)
        assignment_reject(user=OPERATOR, study=study, assignment=tasks[0], feedback=REJECTION, category="FAILED_CHECK")
        answered(study, pid, worker="p_four", session=server.add_submission(pid, participant_id="p_four")["id"])
        return answers

    monkeypatch.setattr(score_service, "_annotation_frame", one_rejected_and_another_submitted_meanwhile)
    run = score(study)
    monkeypatch.undo()

    counted = study_counting_changed_at(study=study)
    assert score_run_read_at(run) < counted < run.finished_at
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (run.pk, 3, True)
    stale = scores_staleness(study, run, user=None)  # the summary's and the bundle's stale_units
    assert (stale["stale"], stale["stale_units"], stale["scored_units"]) == (True, 1, 1), stale

    again = score(study)
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (again.pk, 3, False)
    assert scores_staleness(study, again, user=None)["stale_units"] == 0


def test_rejecting_a_task_held_when_the_run_read_the_answers_leaves_the_unit_and_the_study_fresh(prolific):  # noqa: F811
    """Held impostor work never counted, and rejecting it leaves it out still: the usual step after
    a hold changes nothing that counts, so the unit's scores and the study's stay fresh."""
    _platform, server = prolific
    study, pid = one_unit_on_prolific("reject-held")
    honest = server.add_submission(pid, participant_id="p_honest")
    answered(study, pid, worker="p_honest", session=honest["id"])
    taken = server.add_submission(pid, participant_id="p_real")
    impostor = answered(study, pid, worker="p_fabricated", session=taken["id"])  # Prolific says p_real holds it
    study_sync(study=study)
    assert PlatformSubmission.objects.get(platform_assignment_id=taken["id"]).flag == Flag.WORKER_MISMATCH
    run = score(study)
    assert (unit_row(study)["n_annotators"], unit_row(study)["stale"]) == (1, False)
    counted_changed_at = study_counting_changed_at(study=study)

    assignment_reject(user=OPERATOR, study=study, assignment=impostor, feedback=REJECTION, category="FAILED_CHECK")

    impostor.refresh_from_db()
    assert impostor.status == "rejected" and impostor.reviewed_at > run.finished_at
    row = unit_row(study)
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (run.pk, 1, False)
    stale = scores_staleness(study, run, user=None)
    assert (stale["stale"], stale["stale_units"]) == (False, 0), stale
    assert study_counting_changed_at(study=study) == counted_changed_at


def test_rejecting_a_task_whose_hold_was_cleared_before_the_run_makes_the_unit_stale(prolific):  # noqa: F811
    """A hold a researcher cleared before the run let the task count: rejecting it afterwards takes
    counted answers out, so the unit is stale (only work still on hold is left out of the rule)."""
    _platform, server = prolific
    study, pid = one_unit_on_prolific("reject-cleared")
    honest = server.add_submission(pid, participant_id="p_honest")
    answered(study, pid, worker="p_honest", session=honest["id"])
    taken = server.add_submission(pid, participant_id="p_real")
    impostor = answered(study, pid, worker="p_fabricated", session=taken["id"])
    study_sync(study=study)
    submission_clear(user=OPERATOR, submission=PlatformSubmission.objects.get(platform_assignment_id=taken["id"]))
    run = score(study)
    assert (unit_row(study)["n_annotators"], unit_row(study)["stale"]) == (2, False)

    assignment_reject(user=OPERATOR, study=study, assignment=impostor, feedback=REJECTION, category="FAILED_CHECK")

    row = unit_row(study)  # n_annotators: the run's count
    assert (row["score_run"], row["n_annotators"], row["stale"]) == (run.pk, 2, True)
    assert study_counting_changed_at(study=study) > score_run_read_at(run)
