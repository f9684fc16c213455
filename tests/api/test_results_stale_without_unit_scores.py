"""A study kind whose runs write no unit scores (generalization, question validation, properties)
has no unit to say its scores are stale: GET /api/v1/studies/<id>/results/'s ``scores_stale``
(``bundle.export.scores_staleness``, the bundle's settings.json section too) calls its latest run
stale when the answers that count changed after it began reading them (``study_counting_changed_at``
against ``score_run_read_at``: work submitted, rejected, put on hold or cleared, and for a
generalization study a question's validation status), and fresh again once the study is scored
again. A copy imported from a bundle that called such a run stale stays stale until scored here."""
from __future__ import annotations

import io

import pytest

from annotations.models import Assignment, Claim
from annotations.selectors import claim_scored
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject
from scoring.models import ScoreRun
from scoring.services import score, study_score
from scoring.services.bundle import bundle_import, bundle_stream
from scoring.services.bundle.export import scores_staleness
from studies.models import GeneralizationQuestion, Platform, Study
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import make_study
from tests.work import work

pytestmark = pytest.mark.django_db

REJECTION = "These answers were given without reading the question, so they cannot be accepted. " * 2


def _scored_generalization_study(researcher) -> tuple[Study, ScoreRun]:
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=3, quota=3, units_per_task=3,
                       owner=researcher, name="gen-stale")
    for n in range(3):
        work(study, f"GENSTALE{n}", platform=Platform.LINK)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return study, run


def _stale(api, study) -> dict:
    response = api.get(f"/api/v1/studies/{study.pk}/results/")
    assert response.status_code == 200, response.content
    return response.json()["scores_stale"]


def test_a_generalization_run_is_stale_after_a_counted_task_is_rejected_and_fresh_after_scoring_again(
        client_for, researcher):
    study, run = _scored_generalization_study(researcher)
    api = client_for(researcher)
    stale = _stale(api, study)
    assert (stale["stale"], stale["score_run"], stale["scored_units"]) == (False, run.pk, 0) and "note" not in stale

    task = Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED).order_by("pk").first()
    assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REJECTION)

    stale = _stale(api, study)
    assert stale["stale"] is True, stale
    assert stale["score_run"] == run.pk and stale["note"]

    again = study_score(study=study, similarity=False)
    assert again.status == ScoreRun.Status.DONE, again.error
    stale = _stale(api, study)
    assert (stale["stale"], stale["score_run"]) == (False, again.pk) and "note" not in stale


def test_a_generalization_run_is_stale_after_one_of_its_questions_is_marked_invalid(client_for, researcher):
    study, run = _scored_generalization_study(researcher)
    api = client_for(researcher)
    assert _stale(api, study)["stale"] is False
    question = GeneralizationQuestion.objects.filter(unit__study=study).order_by("pk").first()

    generalization_questions_set_validation(questions=[question],
                                            status=GeneralizationQuestion.Validation.INVALID)

    stale = _stale(api, study)
    assert stale["stale"] is True and stale["score_run"] == run.pk, stale


def test_a_task_submitted_while_the_run_reads_its_answers_makes_the_run_stale(client_for, researcher, monkeypatch):
    """The run reads every answer first and finishes minutes later: a task submitted between is dated
    before it finished, yet the run left it out."""
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=3, quota=4, units_per_task=3,
                       owner=researcher, name="gen-mid-run")
    for n in range(3):
        work(study, f"GENMID{n}", platform=Platform.LINK)
    questions = score._generalization_questions

    def a_fourth_worker_submits_meanwhile(units, answers):  # the answers are read already
        work(study, "GENMID3", platform=Platform.LINK)
        return questions(units, answers)

    monkeypatch.setattr(score, "_generalization_questions", a_fourth_worker_submits_meanwhile)
    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["generalization"]["all"]["n_answers_before"] == 3
    assert Claim.objects.filter(claim_scored(study=study), study=study).count() == 4
    assert Assignment.objects.filter(study=study, submitted_at__lt=run.finished_at).count() == 4
    stale = _stale(client_for(researcher), study)
    assert (stale["stale"], stale["score_run"]) == (True, run.pk), stale
    assert stale["note"]


def test_a_copy_of_a_bundle_that_called_its_generalization_run_stale_stays_stale(client_for, researcher):
    study, run = _scored_generalization_study(researcher)
    api = client_for(researcher)
    task = Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED).order_by("pk").first()
    assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REJECTION)
    assert _stale(api, study)["stale"] is True

    data = b"".join(bundle_stream(study=study, user=researcher))
    copy = bundle_import(file=io.BytesIO(data), name="gen-stale-copy", filename="gen-bundle.zip", owner=researcher)

    stale = scores_staleness(copy, None, user=researcher)  # no run here: what its bundle's settings.json says
    assert (stale["stale"], stale["score_run"], stale["scored_units"]) == (True, run.pk, 0), stale
    assert stale["note"]
    assert f"run {run.pk} of study {study.pk}" in stale["scores_from"]
    assert "the bundle called its scores stale at study level" in stale["scores_from"]
    assert "0 of its 0 units" not in stale["scores_from"]
