"""Two runs of one study that overlap: the study's latest run is the one asked for last
(``score_run_latest``, by creation), and its unit scores are the study's. A run that a run asked
for after it overtook (done first) stores nothing where it would write (``study_score``'s
transaction, under a lock of the study's row: ``runs.score_run_store_lock``) and fails, saying it
was superseded; before, the older, slower run overwrote the newer run's unit scores and, finishing
last, became "latest"."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from scoring.models import ScoreRun, UnitScore
from scoring.selectors import score_run_latest
from scoring.services import score as score_module
from scoring.services import score_run_enqueue, study_score
from scoring.tasks import score_study_task
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db
STORE = "storing the unit scores"


@pytest.fixture
def owner():
    user = get_user_model().objects.create_user(username="olga", password="pw", is_staff=True)
    return grant(user, "studies.view_study", "studies.change_study", "scoring.add_scorerun")


@pytest.fixture
def study(owner, settings):
    settings.RL_SCORING_SIMILARITY = False
    study = open_utility_study(name="overlap", n_items=2, n_sources=1, quota=3, owner=owner)
    work(study, "w1")  # what the older run computes from
    return study


def _when_storing(monkeypatch, then) -> None:
    """Call ``then()`` once, when a run reaches its store stage (after it computed, before its
    transaction): the seam the scoring's own stage report gives."""
    real, fired = score_module.score_stage, []

    def stage(name: str) -> None:
        if name == STORE and not fired:
            fired.append(name)
            then()
        real(name)

    monkeypatch.setattr(score_module, "score_stage", stage)


def test_an_older_run_that_finishes_last_stores_nothing_and_is_not_latest(study, owner, monkeypatch,
                                                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        older = score_run_enqueue(study=study, user=owner)
    newer = []

    def newer_run_in_full() -> None:
        work(study, "w2")  # more answers: the newer run's unit scores count two annotators
        newer.append(study_score(study=study))  # e.g. manage.py score_study while the queued run computes

    _when_storing(monkeypatch, newer_run_in_full)
    assert score_study_task(study.pk, older.pk) == older.pk

    older.refresh_from_db()
    (newer,) = newer
    assert newer.status == ScoreRun.Status.DONE and newer.created_at > older.created_at
    assert older.status == ScoreRun.Status.FAILED
    assert older.error == (f"Superseded: run {newer.pk}, asked for after this one, finished first; its results are "
                           "the study's latest, and this run stored nothing.")
    assert older.results == {} and older.finished_at >= newer.finished_at
    assert score_run_latest(study=study) == newer
    scores = UnitScore.objects.filter(study=study)
    assert scores.count() == 2
    assert set(scores.values_list("score_run_id", "n_annotators")) == {(newer.pk, 2)}


def test_a_newer_run_that_finishes_last_is_stored_and_latest(study, owner, monkeypatch,
                                                            django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        older = score_run_enqueue(study=study, user=owner)  # queued; its worker starts late
    _when_storing(monkeypatch, lambda: score_study_task(study.pk, older.pk))  # ... and is done first

    newer = study_score(study=study)

    older.refresh_from_db()
    assert [older.status, newer.status] == [ScoreRun.Status.DONE] * 2 and newer.created_at > older.created_at
    assert score_run_latest(study=study) == newer
    assert set(UnitScore.objects.filter(study=study).values_list("score_run_id", flat=True)) == {newer.pk}


def test_runs_that_do_not_overlap_are_each_stored_and_the_last_asked_for_is_latest(study):
    first = study_score(study=study)
    work(study, "w2")
    second = study_score(study=study)
    assert [first.status, second.status] == [ScoreRun.Status.DONE] * 2
    assert score_run_latest(study=study) == second
    assert set(UnitScore.objects.filter(study=study).values_list("score_run_id", "n_annotators")) == {(second.pk, 2)}
