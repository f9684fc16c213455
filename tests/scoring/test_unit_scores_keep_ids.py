"""A re-score writes the study's unit scores in place (``score._store_unit_scores``): each unit keeps
its ``UnitScore`` row and id from run to run, so a reader paging ``/api/v1/scores/`` while a run
stores neither skips nor repeats a unit (``lab.api.pagination``: cursor pages, by id). Before, each
run deleted the study's rows and made new ones with new ids: the audit's probe read, with
``page_size=2``, 6 rows for 4 units (two of them twice, labelled run 1 and run 2) in id order and
2 of 4 (then no ``next``) in ``-id`` order. Rows of units a run no longer scores are removed."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from annotations.models import Annotation
from annotations.services.withdrawal import participant_withdraw
from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.api.tokens import api_token_create
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    user = get_user_model().objects.create_user(username="uma", password="pw", is_staff=True)
    return grant(user, "studies.view_study", "studies.change_study", "scoring.add_scorerun")


@pytest.fixture
def client(owner) -> APIClient:
    _, key = api_token_create(user=owner, name="t", read_only=True, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def study(owner, settings):
    """2 items x 2 sources, a task of 2 units each: w1 answers two units, w2 the other two; scored once."""
    settings.RL_SCORING_SIMILARITY = False
    study = open_utility_study(name="keep-ids", n_items=2, n_sources=2, quota=3, owner=owner)
    work(study, "w1")
    work(study, "w2")
    run = study_score(study=study)
    assert run.status == ScoreRun.Status.DONE, run.error
    return study


def _rows(study) -> dict[tuple[int, int], tuple[int, int | None, int | None]]:
    """(item, source) -> (id, score_run, n_annotators) of the study's unit scores."""
    return {(i, s): (pk, r, n) for pk, i, s, r, n in UnitScore.objects.filter(study=study).values_list(
        "id", "item_id", "source_id", "score_run_id", "n_annotators")}


@pytest.mark.parametrize("ordering", [None, "-id"])
def test_paging_while_a_rescore_stores_reads_every_unit_once(study, client, ordering):
    before = _rows(study)
    assert len(before) == 4 and {n for _, _, n in before.values()} == {1}
    params = {"study": study.pk, "page_size": 2, **({"ordering": ordering} if ordering else {})}
    page = client.get("/api/v1/scores/", params).json()
    seen = page["results"]
    assert len(seen) == 2 and page["next"]

    work(study, "w3")  # one more worker's answers: two of the units have two annotators now
    rerun = study_score(study=study)
    assert rerun.status == ScoreRun.Status.DONE, rerun.error

    while page["next"]:
        page = client.get(page["next"]).json()
        seen += page["results"]
    units = [(r["item"], r["source"]) for r in seen]
    assert len(units) == 4 and set(units) == set(before)  # every unit exactly once
    after = _rows(study)
    assert {k: pk for k, (pk, _, _) in after.items()} == {k: pk for k, (pk, _, _) in before.items()}  # ids kept
    assert {r for _, r, _ in after.values()} == {rerun.pk}  # each row the new run's scores
    assert sorted(n for _, _, n in after.values()) == [1, 1, 2, 2]
    assert [r["id"] for r in seen] == sorted((pk for pk, _, _ in before.values()), reverse=ordering == "-id")


def test_rows_of_units_no_longer_scored_are_removed_the_others_keep_their_ids(study, owner):
    before = _rows(study)
    w1_units = set(UnitScore.objects.filter(study=study).values_list("item_id", "source_id")) - set(
        Annotation.objects.filter(claim__participant__external_id="w2").values_list(
            "claim__unit__item_id", "claim__unit__source_id"))
    assert len(w1_units) == 2
    participant_withdraw(user=owner, study=study, worker_id="w1")  # w1's answers erased: their units unanswered

    rerun = study_score(study=study)

    assert rerun.status == ScoreRun.Status.DONE, rerun.error
    after = _rows(study)
    assert set(after) == set(before) - w1_units
    assert after == {unit: (before[unit][0], rerun.pk, 1) for unit in after}
