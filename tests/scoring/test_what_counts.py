"""Scoring and the exports read the one definition of "this answer counts"
(``annotations.selectors.claims_that_count``). Issue 11 bug 1: scoring took every claim with both
answers unless its assignment was rejected, so a unit with a quota of 1 was scored with the answers
of workers who had left, expired or were still at work.

Every state is built through the questionnaire's services: start, answer, leave (return), expire,
submit, reject (the releasing service the review uses)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from annotations.models import Annotation, Assignment, PlatformSubmission
from annotations.selectors import HOLDING_FLAGS
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.sync import study_sync
from annotations.services.release import assignment_expire_stale, assignment_release, assignment_return
from scoring.api.export_annotations import annotation_columns, annotation_rows
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.api.tokens import api_token_create
from tests.annotations.platforms.conftest import prolific, prolific_server, start_assignment  # noqa: F401
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def right_then_right(claim, step):
    return "yes"


def wrong_then_right(claim, step):
    return "no" if step == "before" else "yes"


def test_a_quota_one_unit_is_scored_with_exactly_the_one_worker_whose_answers_count():
    study = open_utility_study(name="quota-one", n_items=1, n_sources=1, quota=1, gold="yes")
    # Each of these answered both steps and then gave the slot back: none of them counts.
    left = work(study, "LEFT00000000000000000001", answer=right_then_right, submit=False)
    assignment_return(assignment=left)
    expired = work(study, "EXPD00000000000000000002", answer=right_then_right, submit=False)
    expired.refresh_from_db()
    assignment_expire_stale(now=expired.expires_at + timedelta(minutes=1))
    rejected = work(study, "REJD00000000000000000003", answer=right_then_right)
    assignment_release(assignment=rejected, status=Assignment.Status.REJECTED)
    # The one worker whose answers count: wrong before the rationale, right after (useful).
    counted = work(study, "CNTD00000000000000000004", answer=wrong_then_right)
    statuses = set(Assignment.objects.filter(study=study).values_list("status", flat=True))
    assert statuses == {"returned", "expired", "rejected", "submitted"}  # one each
    assert Annotation.objects.filter(claim__study=study, step="after").count() == 4

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    unit = UnitScore.objects.get(study=study)
    assert unit.n_annotators == 1
    assert (unit.before_majority, unit.after_majority, unit.utility) == ("no", "yes", 1)
    assert run.results["agreement"]["before"]["n_annotations"] == 1

    # The export marks the same answers, and only those, as counting.
    columns = [c.name for c in annotation_columns(raw_worker_ids=False)]
    rows = [dict(zip(columns, row, strict=True)) for row in annotation_rows(
        Annotation.objects.filter(claim__study=study), study=study, user=None, raw_worker_ids=False)]
    assert len(rows) == 8
    assert {r["assignment_id"] for r in rows if r["counts"]} == {counted.pk}
    assert sum(r["counts"] for r in rows) == 2

    # The API's study counts read the same definition: two answers (before and after) count.
    admin = get_user_model().objects.create_superuser("root-counts", password="x")
    _, key = api_token_create(user=admin, name="counts", by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get(f"/api/v1/studies/{study.pk}/").json()["n_annotations"] == 2
    listed = client.get("/api/v1/studies/").json()["results"]
    assert [s["n_annotations"] for s in listed if s["id"] == study.pk] == [2]


def test_answers_of_a_task_still_at_work_are_not_scored():
    study = open_utility_study(name="still-at-work", n_items=1, n_sources=1, quota=1, gold="yes")
    work(study, "BUSY00000000000000000001", answer=wrong_then_right, submit=False)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.FAILED
    assert "no completed answers" in run.error
    assert not UnitScore.objects.filter(study=study).exists()


def test_work_on_hold_and_rejected_work_are_counted_as_left_out_and_held_work_is_warned_about(prolific):  # noqa: F811
    """Work that sync holds (the platform's worker is not the participant who answered) is left out
    of the scores until a researcher clears it: the results count it, and rejected work, and warn
    that the figures may change once the held work is cleared."""
    from scoring.reports.sections import utility_section

    _platform, server = prolific
    study = open_utility_study(name="held-work", n_items=1, n_sources=1, quota=3, gold="yes")
    pid = study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id
    for worker, submitter in (("p_honest", "p_honest"), ("p_fabricated", "p_real")):
        submission = server.add_submission(pid, participant_id=submitter)
        task = start_assignment(study, platform="prolific", worker_id=worker, assignment_id=submission["id"],
                                task_id=pid)
        for claim in task.claims.all():
            for step in ("before", "after"):
                annotation_submit(assignment=task, claim=claim, step=step, answer=wrong_then_right(claim, step))
        assignment_submit(assignment=task)
    rejected = work(study, "REJD00000000000000000009", answer=right_then_right)
    assignment_release(assignment=rejected, status=Assignment.Status.REJECTED)
    study_sync(study=study)
    assert PlatformSubmission.objects.filter(flag=PlatformSubmission.Flag.WORKER_MISMATCH).count() == 1

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    assert UnitScore.objects.get(study=study).n_annotators == 1
    counted = run.results["counted_answers"]
    assert (counted["tasks_approved"], counted["tasks_not_reviewed"]) == (0, 1)
    assert (counted["tasks_on_hold"], counted["answers_on_hold"]) == (1, 2)
    # What holds work is named, with the setting it depends on, and the held tasks by reason.
    assert counted["tasks_on_hold_by_reason"] == {"worker_mismatch": 1}
    assert "RL_SYNC_UNLISTED_GRACE_MINUTES" in counted["hold_rule"] and "60 minutes" in counted["hold_rule"]
    assert [flag for flag in HOLDING_FLAGS if flag not in counted["hold_rule"]] == []  # every reason is named
    assert (counted["tasks_rejected"], counted["answers_rejected"]) == (1, 2)
    assert any(w.startswith("1 submitted tasks (2 answers) are on hold") and "once a researcher clears it" in w
               for w in run.results["warnings"])
    assert "Left out: 1 tasks on hold (2 answers; they count once a researcher clears them) and 1 rejected " \
           "(2 answers)" in " ".join(utility_section(run.results).notes)
