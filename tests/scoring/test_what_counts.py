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

from annotations.models import Annotation, Assignment
from annotations.services.release import assignment_expire_stale, assignment_release, assignment_return
from scoring.api.export_annotations import annotation_columns, annotation_rows
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.api.tokens import api_token_create
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
        Annotation.objects.filter(claim__study=study), study=study, raw_worker_ids=False)]
    assert len(rows) == 8
    assert {r["assignment_id"] for r in rows if r["counts"]} == {counted.pk}
    assert sum(r["counts"] for r in rows) == 2

    # The API's study counts read the same definition: two answers (before and after) count.
    admin = get_user_model().objects.create_superuser("root-counts", password="x")
    _, key = api_token_create(user=admin, name="counts")
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
