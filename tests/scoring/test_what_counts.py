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

from annotations.models import Annotation, Assignment, PlatformSubmission, Unit
from annotations.selectors import HOLDING_FLAGS, claims_that_count
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.sync import study_sync
from annotations.services.release import assignment_expire_stale, assignment_release, assignment_return
from annotations.services.steps import VALIDATION_FIELDS, steps_for
from scoring.api.export_annotations import annotation_columns, annotation_rows
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.api.tokens import api_token_create
from studies.models import GeneralizationQuestion, Study
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.platforms.conftest import (  # noqa: F401
    prolific,
    prolific_server,
    start_assignment,
)
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
    # the report names what puts work on hold beside the count, and that a hold used the setting of its sync
    assert ("Left out: 1 tasks on hold (2 answers; they count once a researcher clears them; on hold is "
            f"{counted['hold_rule']}) and 1 rejected (2 answers)") in " ".join(utility_section(run.results).notes)
    assert "60 minutes as it stood when this run scored; each hold was placed by a sync with the value it read then" in \
        counted["hold_rule"]


def _api_client(name: str) -> APIClient:
    admin = get_user_model().objects.create_superuser(f"root-{name}", password="x")
    _, key = api_token_create(user=admin, name=name, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _exported(study) -> list[dict]:
    columns = [c.name for c in annotation_columns(raw_worker_ids=False)]
    return [dict(zip(columns, row, strict=True)) for row in annotation_rows(
        Annotation.objects.filter(claim__study=study), study=study, user=None, raw_worker_ids=False)]


def _three_workers_then_first_question_invalid(kind: str):
    """A study of ``kind`` on 2 items x 1 generalization question x 1 source, 3 workers per unit, each
    task both units, every task completed; then the first item's question is marked invalid."""
    study = make_study(kind=kind, n_items=2, n_genq=1, n_sources=1, quota=3, units_per_task=2)
    for _ in range(3):
        task = assignment_start(study=study, participant=ParticipantFactory())
        for claim in task.claims.all():
            for step in steps_for(kind=kind, is_attention_check=bool(claim.attention_check_id)):
                judged = step == Annotation.Step.VALIDATION
                annotation_submit(assignment=task, claim=claim, step=step, answer="" if judged else "yes",
                                  payload={name: "yes" for name, _ in VALIDATION_FIELDS} if judged else None)
        assignment_submit(assignment=task)
    invalid = GeneralizationQuestion.objects.filter(unit__study=study).order_by("item_id").first()
    generalization_questions_set_validation(questions=[invalid], status=GeneralizationQuestion.Validation.INVALID)
    return study, invalid


def test_answers_to_a_question_marked_invalid_do_not_count_where_scoring_leaves_them_out():
    """A generalization study's answers to a question marked invalid are paid for and fill their unit
    (``claim_counts``), but scoring leaves them out (Gen-U's rule): the export's ``counts``, the API's
    ``counts`` of each answer and the study's ``n_annotations`` say what scoring reads
    (``annotations.selectors.claim_scored``)."""
    study, invalid = _three_workers_then_first_question_invalid(Study.Kind.GENERALIZATION)
    study_close(user=OPERATOR, study=study)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["n_units"] == 1 and run.results["generalization"]["answers_invalid_left_out"] == 6
    assert run.results["agreement"]["before"]["n_annotations"] == 3
    rows = _exported(study)
    assert len(rows) == 12
    assert {r["counts"] for r in rows if r["generalization_question_id"] == invalid.pk} == {False}
    assert sum(r["counts"] for r in rows) == 6
    client = _api_client("invalid-question")
    assert client.get(f"/api/v1/studies/{study.pk}/").json()["n_annotations"] == 6
    assert [s["n_annotations"] for s in client.get("/api/v1/studies/").json()["results"] if s["id"] == study.pk] == [6]
    listed = client.get("/api/v1/annotations/", {"study": study.pk, "page_size": 100}).json()["results"]
    assert len(listed) == 12
    assert {(a["generalization_question"] == invalid.pk, a["counts"]) for a in listed} == {(True, False), (False, True)}
    # The rule that pays and fills units is unchanged: every task still counts there.
    assert claims_that_count(study=study).count() == 6
    assert list(Unit.objects.filter(study=study).values_list("n_completed", flat=True)) == [3, 3]


def test_a_question_validation_study_counts_its_answers_to_a_question_marked_invalid():
    """A question-validation study is there to judge its questions: scoring reads its answers to a
    question marked invalid as any other, and so do ``counts`` and ``n_annotations``."""
    study, invalid = _three_workers_then_first_question_invalid(Study.Kind.QUESTION_VALIDATION)

    rows = _exported(study)

    assert [r["generalization_question_id"] for r in rows].count(invalid.pk) == 3  # one judgement a worker
    assert all(r["counts"] for r in rows)
    client = _api_client("question-validation")
    assert client.get(f"/api/v1/studies/{study.pk}/").json()["n_annotations"] == len(rows)
    listed = client.get("/api/v1/annotations/", {"study": study.pk, "page_size": 100}).json()["results"]
    assert len(listed) == len(rows) and all(a["counts"] for a in listed)


def test_the_api_lists_say_which_work_is_held_and_which_answers_count(prolific):  # noqa: F811
    """A Prolific task sync held (another worker submitted it on the platform) stays ``submitted``:
    the assignments list says it is ``on_hold`` and the annotations list that its answers do not
    count, as the export does."""
    _platform, server = prolific
    study = open_utility_study(name="held-in-lists", n_items=1, n_sources=1, quota=3, gold="yes")
    pid = study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id
    tasks = {}
    for worker, submitter in (("p_honest", "p_honest"), ("p_fabricated", "p_real")):
        submission = server.add_submission(pid, participant_id=submitter)
        task = start_assignment(study, platform="prolific", worker_id=worker, assignment_id=submission["id"],
                                task_id=pid)
        for claim in task.claims.all():
            for step in ("before", "after"):
                annotation_submit(assignment=task, claim=claim, step=step, answer=wrong_then_right(claim, step))
        tasks[worker] = assignment_submit(assignment=task)
    study_sync(study=study)
    client = _api_client("held-lists")

    assignments = client.get("/api/v1/assignments/", {"study": study.pk}).json()["results"]
    answers = client.get("/api/v1/annotations/", {"study": study.pk, "page_size": 100}).json()["results"]

    assert {(a["id"], a["status"], a["on_hold"]) for a in assignments} == {
        (tasks["p_honest"].pk, "submitted", False), (tasks["p_fabricated"].pk, "submitted", True)}
    assert {(a["assignment"], a["counts"]) for a in answers} == {
        (tasks["p_honest"].pk, True), (tasks["p_fabricated"].pk, False)}
    assert {r["assignment_id"]: r["counts"] for r in _exported(study)} == {
        tasks["p_honest"].pk: True, tasks["p_fabricated"].pk: False}
