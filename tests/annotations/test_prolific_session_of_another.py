"""Work entered under a Prolific session that Prolific lists for another participant. Anyone who
knows a study's entry URL and a SESSION_ID of it (a shared screenshot, a link passed on) can enter
with a PROLIFIC_PID of their own and that session.

- A session of a worker who withdrew: sync skips every row of theirs (nothing of theirs is stored
  again), and that skipped row must not make the impostor's work count as listed: it is held
  (``NOT_ON_PLATFORM``), stops counting, reopens its unit, and early stopping no longer waits on it
  (before, it counted for good and the study never closed).
- A session of a participant still in the study: sync holds the impostor's work (``WORKER_MISMATCH``)
  and that row, of another worker, is no proof that the id is the impostor's work: rejecting it
  rejects it here only (nothing sent, its slots given back), and approving it is refused; before,
  the rejection went out under the real participant's session and rejected their submission."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, PlatformCall, PlatformSubmission, Unit
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve, assignment_reject, submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.services.stopping import studies_all_decided, study_close_when_decided
from annotations.services.withdrawal import participant_withdraw
from studies.models import Study
from tests.annotations.test_prolific_close_unlisted import is_open, one_unit, stop_calls, unit_state
from tests.annotations.test_prolific_unlisted_holds import (
    FEEDBACK,
    published,  # noqa: F401 (fixture)
    slots_claimed,
    transitions,
)
from tests.annotations.test_sync_unlisted_work import counted, enter, hex24, minutes_pass

pytestmark = pytest.mark.django_db

NOT_ON_PLATFORM = PlatformSubmission.Flag.NOT_ON_PLATFORM
WORKER_MISMATCH = PlatformSubmission.Flag.WORKER_MISMATCH


def test_a_withdrawn_workers_session_entered_by_someone_else_is_held_and_lets_the_study_close(prolific):
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    first = server.add_submission(prolific_id, participant_id=hex24())
    own = enter(study, prolific_id, pid=first["participant_id"], session=first["id"])
    study_sync(study=study)
    assert assignment_approve(user=OPERATOR, study=study, assignment=own).status == Assignment.Status.APPROVED
    participant_withdraw(user=OPERATOR, study=study, worker_id=first["participant_id"])  # their task is erased

    real = []
    for _ in range(2):
        row = server.add_submission(prolific_id, participant_id=hex24())
        real.append(enter(study, prolific_id, pid=row["participant_id"], session=row["id"]))
    impostor = enter(study, prolific_id, pid=hex24(), session=first["id"])  # the withdrawn worker's session
    assert unit_state(study) == (True, 3)  # it counts until a sync holds it

    minutes_pass(120, impostor, *real)
    for _ in range(3):
        study_sync(study=study)

    held = PlatformSubmission.objects.get(assignment=impostor)
    assert held.flag == NOT_ON_PLATFORM and held.worker_id == impostor.participant.external_id
    assert counted(study, impostor) == 0
    assert unit_state(study) == (False, 5)  # reopened: the impostor's answers count no more
    assert not PlatformSubmission.objects.filter(worker_id=first["participant_id"]).exists()  # withdrawn: not stored
    assert is_open(study) and stop_calls() == []

    # A third real worker decides the unit: nothing unlisted decides it, so the study closes.
    row = server.add_submission(prolific_id, participant_id=hex24())
    enter(study, prolific_id, pid=row["participant_id"], session=row["id"])
    study_sync(study=study)
    assert unit_state(study)[0]  # decided (its quota keeps the held task's slot)
    assert studies_all_decided() == [study.pk]
    assert study_close_when_decided(study=study)
    assert not is_open(study) and stop_calls() == [("stop_study", "confirmed")]
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED

    # Rejecting the impostor's held work sends nothing under the withdrawn worker's session.
    rejected = assignment_reject(user=OPERATOR, study=study, assignment=impostor, feedback=FEEDBACK)
    assert rejected.status == Assignment.Status.REJECTED
    assert [call["body"]["action"] for call in transitions(server, first["id"])] == ["APPROVE"]
    assert server.submissions[first["id"]]["status"] == "APPROVED"
    audit = PlatformCall.objects.get(assignment=impostor, operation=PlatformCall.Operation.REJECT)
    assert audit.status == PlatformCall.Status.FAILED and "rejected here only" in audit.error


def with_a_session_of_another(setup) -> tuple[Assignment, dict]:
    """Participant V's real session S is awaiting review on Prolific (they have not opened the app
    yet); someone enters study A with a made-up PROLIFIC_PID and V's SESSION_ID (the first to bring
    it here, so the entry takes it); sync holds it as a worker mismatch: (the impostor's task, V's
    submission)."""
    study, study_id, server = setup
    submission = server.add_submission(study_id, participant_id=hex24())
    impostor = enter(study, study_id, pid=hex24(), session=submission["id"])
    study_sync(study=study)
    row = PlatformSubmission.objects.get(platform_assignment_id=submission["id"])
    assert row.assignment_id == impostor.pk and row.flag == WORKER_MISMATCH
    assert row.worker_id == submission["participant_id"] and row.platform_status == "AWAITING REVIEW"
    return impostor, submission


def test_rejecting_an_impostor_under_another_participants_session_rejects_it_here_only(published):  # noqa: F811 (the fixture)
    study, _study_id, server = published
    impostor, submission = with_a_session_of_another(published)
    assert slots_claimed(study) == 2

    rejected = assignment_reject(user=OPERATOR, study=study, assignment=impostor, feedback=FEEDBACK)

    assert rejected.status == Assignment.Status.REJECTED
    assert transitions(server, submission["id"]) == []  # nothing sent under V's session
    assert server.submissions[submission["id"]]["status"] == "AWAITING REVIEW"
    assert slots_claimed(study) == 0  # the impostor's slots are given back
    audit = PlatformCall.objects.get(assignment=impostor, operation=PlatformCall.Operation.REJECT)
    assert audit.status == PlatformCall.Status.FAILED and audit.sent_at is None
    assert "another worker holds its assignment id" in audit.error and "rejected here only" in audit.error


def test_an_impostor_under_another_participants_session_is_never_approved_even_cleared(published):  # noqa: F811 (the fixture)
    study, _study_id, server = published
    impostor, submission = with_a_session_of_another(published)
    submission_clear(user=OPERATOR, submission=PlatformSubmission.objects.get(assignment=impostor))

    with pytest.raises(PlatformServiceError, match="another worker holds its assignment id"):
        assignment_approve(user=OPERATOR, study=study, assignment=impostor)

    assert transitions(server, submission["id"]) == []
    assert server.submissions[submission["id"]]["status"] == "AWAITING REVIEW"
    impostor.refresh_from_db()
    assert impostor.status == Assignment.Status.SUBMITTED


def test_the_real_participant_of_a_listed_session_is_still_approved_and_rejected_on_prolific(published):  # noqa: F811 (the fixture)
    study, study_id, server = published
    rows = [server.add_submission(study_id, participant_id=hex24()) for _ in range(2)]
    tasks = [enter(study, study_id, pid=row["participant_id"], session=row["id"]) for row in rows]
    study_sync(study=study)

    assert assignment_approve(user=OPERATOR, study=study, assignment=tasks[0]).status == Assignment.Status.APPROVED
    assert assignment_reject(user=OPERATOR, study=study, assignment=tasks[1],
                             feedback=FEEDBACK).status == Assignment.Status.REJECTED

    assert server.submissions[rows[0]["id"]]["status"] == "APPROVED"
    assert server.submissions[rows[1]["id"]]["status"] == "REJECTED"
    assert server.calls("GET", r"/api/v1/submissions/\w+/") == []  # the listed rows are the proof: no owner read
    assert Unit.objects.filter(study=study).exists()
