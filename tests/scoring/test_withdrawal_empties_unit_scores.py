"""A withdrawal that takes every counted answer of a study: the next run fails with "no completed
answers yet", and the unit scores the withdrawn answers made are removed all the same (the store's
removal, ``score._remove_unscored_unit_scores``), so /api/v1/scores/ no longer shows them."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from annotations.services.withdrawal import participant_withdraw
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.models import Platform
from tests.api.conftest import WRITE_PERMISSIONS, grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def test_a_run_after_the_only_answers_were_withdrawn_removes_their_unit_scores(django_user_model):
    owner = grant(django_user_model.objects.create_user(username="wd-owner", password="pw"),
                  *WRITE_PERMISSIONS, "studies.change_study")
    study = open_utility_study(name="wd-empty", n_items=2, n_sources=1, quota=1, owner=owner,
                               platform=Platform.LINK)
    work(study, "PID1", platform=Platform.LINK)
    first = study_score(study=study, similarity=False)
    assert first.status == ScoreRun.Status.DONE, first.error
    assert UnitScore.objects.filter(study=study).count() == 2

    outcome = participant_withdraw(user=owner, study=study, worker_id="PID1")
    assert outcome.withdrawal.n_answers == 4

    again = study_score(study=study, similarity=False)
    assert again.status == ScoreRun.Status.FAILED
    assert "no completed answers yet" in again.error
    assert list(UnitScore.objects.filter(study=study).values_list("item__external_id", "n_annotators")) == []
    # the latest finished run's figures still count the withdrawn answers: still stale, though no unit
    # row is left to say so (review of 1c75b5a: the empty run had turned the warning off)
    client = APIClient()
    client.force_authenticate(owner)
    stale = client.get(f"/api/v1/studies/{study.pk}/results/").json()["scores_stale"]
    assert (stale["stale"], stale["scored_units"], stale["withdrawn_since_run"]["counted_answers"]) == (True, 0, 4)
    assert "Score the study again" in stale["note"]


def test_a_superseded_empty_run_removes_nothing(django_user_model):
    """The removal takes the store's lock and check: a run asked for before a later, finished one
    removes none of that run's rows even when it finds nothing to score."""
    owner = grant(django_user_model.objects.create_user(username="wd-owner2", password="pw"),
                  *WRITE_PERMISSIONS, "studies.change_study")
    study = open_utility_study(name="wd-super", n_items=2, n_sources=1, quota=1, owner=owner,
                               platform=Platform.LINK)
    older = ScoreRun.objects.create(study=study, status=ScoreRun.Status.PENDING, by_operator=True)
    work(study, "PID2", platform=Platform.LINK)
    newer = study_score(study=study, similarity=False)
    assert newer.status == ScoreRun.Status.DONE, newer.error
    participant_withdraw(user=owner, study=study, worker_id="PID2")

    older = study_score(study=study, run=older, similarity=False)
    assert older.status == ScoreRun.Status.FAILED and older.error.startswith("Superseded"), older.error
    assert UnitScore.objects.filter(study=study, score_run=newer).count() == 2
