"""A score run's requester is checked again where the run writes its results
(``scoring.services.runs.score_run_requester_check``, inside ``study_score``'s transaction), not
only when the task starts it: a run computes for up to an hour, and a share revoked meanwhile must
leave the study's latest results and unit scores as they were."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from scoring.models import ScoreRun, UnitScore
from scoring.selectors import score_run_latest
from scoring.services import score as score_module
from scoring.services import score_run_enqueue
from scoring.tasks import score_study_task
from studies.services.sharing import study_share, study_unshare
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _user(name: str):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    return grant(user, "studies.view_study", "scoring.add_scorerun")


@pytest.fixture
def owner():
    return _user("olga")


@pytest.fixture
def study(owner, settings):
    settings.RL_SCORING_SIMILARITY = False
    study = open_utility_study(name="scored", n_items=1, n_sources=1, quota=1, owner=owner)
    work(study, "w1")  # something to score
    return study


def _queued(study, user, capture):
    with capture(execute=False):
        return score_run_enqueue(study=study, user=user)


def _revoke_when(stage: str, *, study, owner, user, monkeypatch) -> list[str]:
    """Revoke ``user``'s share of ``study`` (through the sharing service) when the scoring reaches
    ``stage``: after the task's start checked the requester, before anything is written."""
    real, seen = score_module.score_stage, []

    def stage_then_revoke(name: str) -> None:
        seen.append(name)
        if name == stage:
            study_unshare(study=study, user=owner, with_user=user)
        real(name)

    monkeypatch.setattr(score_module, "score_stage", stage_then_revoke)
    return seen


def test_a_share_revoked_while_the_run_computes_writes_nothing(study, owner, monkeypatch,
                                                               django_capture_on_commit_callbacks):
    first = _queued(study, owner, django_capture_on_commit_callbacks)
    score_study_task(study.pk, first.pk)  # the study's latest results, by its owner
    first.refresh_from_db()
    assert first.status == ScoreRun.Status.DONE
    scores_before = list(UnitScore.objects.filter(study=study).order_by("pk").values())
    assert scores_before and {row["score_run_id"] for row in scores_before} == {first.pk}

    shared = _user("sue")
    study_share(study=study, user=owner, with_user=shared)
    run = _queued(study, shared, django_capture_on_commit_callbacks)
    seen = _revoke_when("storing the unit scores", study=study, owner=owner, user=shared, monkeypatch=monkeypatch)
    assert score_study_task(study.pk, run.pk) == run.pk
    assert "storing the unit scores" in seen  # the share went while the run computed, after its start

    run.refresh_from_db()
    assert run.status == ScoreRun.Status.FAILED
    assert run.error == (f"Not scored: sue, who asked for this run, may no longer score this study (study "
                         f"{study.pk}: not found or not yours to score (a study you own or that is shared with you).)")
    assert run.results == {} and run.finished_at is not None
    # Nothing written: the owner's run is still the latest, its unit scores untouched.
    assert score_run_latest(study=study) == first
    assert list(UnitScore.objects.filter(study=study).order_by("pk").values()) == scores_before


def test_the_permission_removed_while_the_run_computes_writes_nothing(study, owner, monkeypatch,
                                                                      django_capture_on_commit_callbacks):
    # The requester's permission read afresh at the write (Django caches it on a user instance).
    shared = _user("sue")
    study_share(study=study, user=owner, with_user=shared)
    run = _queued(study, shared, django_capture_on_commit_callbacks)
    real = score_module.score_stage

    def stage_then_remove(name: str) -> None:
        if name == "storing the unit scores":
            shared.user_permissions.remove(shared.user_permissions.get(codename="add_scorerun"))
        real(name)

    monkeypatch.setattr(score_module, "score_stage", stage_then_remove)
    score_study_task(study.pk, run.pk)
    run.refresh_from_db()
    assert (run.status, run.error) == (
        ScoreRun.Status.FAILED, "Not scored: sue, who asked for this run, may no longer score this study (you may "
                                "not start scoring runs (it needs the permission scoring.add_scorerun).)")
    assert not UnitScore.objects.filter(study=study).exists()
    assert score_run_latest(study=study) is None


def test_a_requester_who_keeps_the_right_and_the_operator_are_written(study, owner,
                                                                      django_capture_on_commit_callbacks):
    shared = _user("sue")
    study_share(study=study, user=owner, with_user=shared)
    runs = []
    for user in (shared, None):  # one after the other: a study being scored is not queued twice
        runs.append(run := _queued(study, user, django_capture_on_commit_callbacks))
        score_study_task(study.pk, run.pk)
        run.refresh_from_db()
    assert [(run.status, run.error) for run in runs] == [(ScoreRun.Status.DONE, "")] * 2
    assert set(UnitScore.objects.filter(study=study).values_list("score_run_id", flat=True)) == {runs[1].pk}
