"""Work that sync holds because Prolific never listed it (``PlatformSubmission.Flag.NOT_ON_PLATFORM``):
a worker typed their own PROLIFIC_PID and SESSION_ID into the study's entry link (the study's real
STUDY_ID). The row sync makes for it is built from the worker's own SESSION_ID, so it proves
nothing about whose submission that id is on Prolific (``common.platform_work_confirm`` asks
Prolific); and an id Prolific has no submission of this study under is rejected here only
(``review.assignment_reject``): nothing is sent, and its unit slots are given back."""
from __future__ import annotations

import pytest
from django.db.models import Sum
from django.test import Client

from annotations.models import Assignment, PlatformCall, PlatformSubmission, Unit
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, assignment_reject, submission_clear
from annotations.services.platforms.sync import study_sync
from tests.annotations.factories import make_study
from tests.annotations.pages import consent, entry_url
from tests.annotations.test_sync_unlisted_work import enter, hex24

pytestmark = pytest.mark.django_db

NOT_ON_PLATFORM = PlatformSubmission.Flag.NOT_ON_PLATFORM
FEEDBACK = ("Your session id is not one Prolific gave you for this study, so there is no submission of this study "
            "to pay: rejected.")


@pytest.fixture
def published(prolific, settings):
    """Study A, 2 questions x 3 workers (6 unit slots, 2 a task), published through the app on the
    fake Prolific server: (study, its Prolific study id, server). Sync holds unlisted work at once."""
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study = make_study(platform="prolific", n_items=2, n_sources=1, quota=3, units_per_task=2, status="draft")
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id, server


def with_another_studys_session(published) -> tuple[Assignment, dict]:
    """Participant P has a real submission in Prolific study B, and enters study A with that
    submission's id as their SESSION_ID; sync holds the work (A's listing lacks it)."""
    study, study_id, server = published
    other = server.add_study(name="Study B")
    pid = hex24()
    submission_b = server.add_submission(other["id"], participant_id=pid)
    task = enter(study, study_id, pid=pid, session=submission_b["id"])
    study_sync(study=study)
    assert PlatformSubmission.objects.get(assignment=task).flag == NOT_ON_PLATFORM
    return task, submission_b


def transitions(server, submission_id: str) -> list[dict]:
    return server.calls("POST", rf"/api/v1/submissions/{submission_id}/transition/")


def slots_claimed(study) -> int:
    return Unit.objects.filter(study=study).aggregate(n=Sum("n_claimed"))["n"] or 0


def test_a_cleared_hold_of_another_studys_session_is_never_approved(published):
    study, _study_id, server = published
    task, submission_b = with_another_studys_session(published)
    submission_clear(user=OPERATOR, submission=PlatformSubmission.objects.get(assignment=task))

    with pytest.raises(PlatformServiceError, match="under a study that is not this study's"):
        assignment_approve(user=OPERATOR, study=study, assignment=task)

    assert transitions(server, submission_b["id"]) == []
    assert server.submissions[submission_b["id"]]["status"] == "AWAITING REVIEW"
    task.refresh_from_db()
    assert task.status == Assignment.Status.SUBMITTED


def test_rejecting_held_work_under_another_studys_session_rejects_it_here_only(published):
    study, _study_id, server = published
    task, submission_b = with_another_studys_session(published)
    assert slots_claimed(study) == 2

    rejected = assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=FEEDBACK)

    assert rejected.status == Assignment.Status.REJECTED
    assert transitions(server, submission_b["id"]) == []
    assert server.submissions[submission_b["id"]]["status"] == "AWAITING REVIEW"
    assert slots_claimed(study) == 0
    audit = PlatformCall.objects.get(assignment=task, operation=PlatformCall.Operation.REJECT)
    assert audit.status == PlatformCall.Status.FAILED and audit.sent_at is None
    assert "not this study's" in audit.error and "rejected here only" in audit.error


def test_rejecting_made_up_sessions_gives_their_slots_back(published):
    study, study_id, server = published
    made_up = [enter(study, study_id, pid=hex24(), session=hex24()) for _ in range(3)]
    assert slots_claimed(study) == 6
    assert study_sync(study=study).flagged == 3

    for task in made_up:
        assert assignment_reject(user=OPERATOR, study=study, assignment=task,
                                 feedback=FEEDBACK).status == Assignment.Status.REJECTED

    assert slots_claimed(study) == 0
    assert server.calls("POST", r"/api/v1/submissions/\w+/transition/") == []  # nothing sent for a made-up id
    audits = PlatformCall.objects.filter(study=study, operation=PlatformCall.Operation.REJECT)
    assert audits.count() == 3 and all("has no work under its assignment id" in a.error for a in audits)
    real = server.add_submission(study_id, participant_id=hex24())
    arrival = consent(Client(), entry_url(study, PROLIFIC_PID=real["participant_id"], STUDY_ID=study_id,
                                          SESSION_ID=real["id"]))
    assert arrival.status_code == 302  # a real participant gets a task

    requests = len(server.requests)
    again = assignment_reject(user=OPERATOR, study=study, assignment=made_up[0], feedback=FEEDBACK)

    assert again.status == Assignment.Status.REJECTED  # a second rejection changes nothing
    assert len(server.requests) == requests and audits.count() == 3 and slots_claimed(study) == 2


def test_a_made_up_session_prolific_cannot_answer_about_stays_held(published):
    study, study_id, server = published
    task = enter(study, study_id, pid=hex24(), session=hex24())
    study_sync(study=study)
    server.token = "another-token"  # Prolific refuses every request (HTTP 401): no answer about the id

    with pytest.raises(PlatformServiceError, match="could not say whose work"):
        assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=FEEDBACK)

    task.refresh_from_db()
    assert task.status == Assignment.Status.SUBMITTED and slots_claimed(study) == 2


def test_a_listed_submission_prolific_no_longer_finds_is_a_refusal_not_a_crash(published):
    study, study_id, server = published
    listed = server.add_submission(study_id, participant_id=hex24())
    task = enter(study, study_id, pid=listed["participant_id"], session=listed["id"])
    study_sync(study=study)
    assert PlatformSubmission.objects.get(assignment=task).flag == ""
    del server.submissions[listed["id"]]  # Prolific answers 404 for it now

    with pytest.raises(PlatformServiceError, match="no submission under its assignment id to reject"):
        assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=FEEDBACK)

    task.refresh_from_db()
    assert task.status == Assignment.Status.SUBMITTED and slots_claimed(study) == 2
