"""Who may start a scoring run: ``score_run_enqueue`` takes the acting user and checks itself that
they hold ``scoring.add_scorerun`` and may VIEW the study (README, "What sharing grants"), so the
admin's "Score now", the outcomes import's "Score it now" and the API get one answer; the operator
(``user=None``, a command or a task) is never refused."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from rest_framework.test import APIClient

from scoring.models import ScoreRun
from scoring.services import score_run_enqueue
from scoring.services.runs import ScoreRunRefused
from scoring.tasks import score_study_task
from studies.api.tokens import api_token_create
from studies.services.sharing import study_share
from tests.api.conftest import grant
from tests.factories import staff
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db
NO_PERMISSION = "you may not start scoring runs (it needs the permission scoring.add_scorerun)."


@pytest.fixture
def owner():
    return grant(get_user_model().objects.create_user(username="olga", password="pw", is_staff=True),
                 "studies.view_study", "scoring.add_scorerun")


@pytest.fixture
def study(owner, settings):
    settings.RL_SCORING_SIMILARITY = False
    return open_utility_study(name="scored", n_items=1, n_sources=1, quota=1, owner=owner)


def _user(name, *perms, active=True):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True, is_active=active)
    return grant(user, "studies.view_study", *perms)


def test_the_service_refuses_whoever_may_not_start_a_scoring_run(study, owner):
    viewer = _user("vic")  # shared with, but without scoring.add_scorerun
    study_share(study=study, user=owner, with_user=viewer)
    stranger = _user("sam", "scoring.add_scorerun")  # the permission, but not the study
    gone = _user("gil", "scoring.add_scorerun", active=False)  # an inactive account holds no permission
    refusals = {}
    for user in (viewer, stranger, gone):
        with pytest.raises(ScoreRunRefused) as refused:
            score_run_enqueue(study=study, user=user)
        refusals[user.username] = str(refused.value)
    assert refusals == {
        "vic": NO_PERMISSION,
        "sam": f"study {study.pk}: not found or not yours to score (a study you own or that is shared with you).",
        "gil": NO_PERMISSION,
    }
    assert not ScoreRun.objects.exists()


def test_the_owner_a_viewer_with_the_permission_and_the_operator_start_runs(study, owner,
                                                                           django_capture_on_commit_callbacks):
    shared = _user("sue", "scoring.add_scorerun")
    study_share(study=study, user=owner, with_user=shared)  # VIEW is enough: scoring changes no answer
    runs = []
    for user in (owner, shared, None):  # each once the run before is finished (one run at a time)
        with django_capture_on_commit_callbacks(execute=False):
            runs.append(run := score_run_enqueue(study=study, user=user))
        assert (run.status, run.already_queued, run.requested_by, run.by_operator) == (
            "pending", False, user, user is None)
        score_study_task(study.pk, run.pk)
    assert len({run.pk for run in runs}) == 3


def test_the_admins_score_now_needs_the_permission_to_start_a_run(study, owner, django_capture_on_commit_callbacks):
    url = reverse("admin:scoring_scorerun_score")
    # scoring.change_scorerun (what "Score now" asked for before) is not the right to start a run ...
    _, changer = staff("cid", all_model_perms=False, extra=("studies.view_study", "scoring.view_scorerun",
                                                            "scoring.change_scorerun"))
    study_share(study=study, user=owner, with_user=get_user_model().objects.get(username="cid"))
    assert changer.post(url, {"study": study.pk}).status_code == 403
    assert not ScoreRun.objects.exists()
    # ... and the page does not offer the button the service would refuse.
    listing = changer.get(reverse("admin:scoring_scorerun_changelist")).content.decode()
    assert 'value="Score now"' not in listing

    # ... scoring.add_scorerun is, as in the API and the README, on a study the user may see.
    _, adder = staff("ada", all_model_perms=False, extra=("studies.view_study", "scoring.view_scorerun",
                                                          "scoring.add_scorerun"))
    study_share(study=study, user=owner, with_user=get_user_model().objects.get(username="ada"))
    with django_capture_on_commit_callbacks(execute=False):
        response = adder.post(url, {"study": study.pk})
    run = ScoreRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("admin:scoring_scorerun_state",
                                                                          args=[run.pk])
    assert 'value="Score now"' in adder.get(reverse("admin:scoring_scorerun_changelist")).content.decode()


def test_the_api_answers_the_services_refusal_with_403(study, monkeypatch):
    # The viewset checks the permission and the study first; were it not to (a caller that forgets),
    # the service's own refusal still comes back as 403 with its reason, and no run is made.
    from scoring.api import views

    monkeypatch.setattr(views, "studies_for_user", lambda **kw: type(study).objects.all())
    stranger = _user("sam", "scoring.add_scorerun")
    _, key = api_token_create(user=stranger, name="test", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.post("/api/v1/score-runs/", {"study": study.pk}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith(f"study {study.pk}: not found or not yours to score")
    assert not ScoreRun.objects.exists()


def _queued(study, user, capture):
    with capture(execute=False):
        return score_run_enqueue(study=study, user=user)


def test_a_run_queued_before_its_share_was_revoked_writes_nothing(study, owner, django_capture_on_commit_callbacks):
    from scoring.models import UnitScore
    from scoring.tasks import score_study_task
    from studies.services.sharing import study_unshare
    from tests.work import work

    shared = _user("sue", "scoring.add_scorerun")
    study_share(study=study, user=owner, with_user=shared)
    run = _queued(study, shared, django_capture_on_commit_callbacks)
    assert (run.requested_by, run.by_operator) == (shared, False)
    work(study, "w1")  # something to score
    study_unshare(study=study, user=owner, with_user=shared)  # while the run waits in the queue
    scored_before = UnitScore.objects.filter(study=study, score_run__isnull=False).count()
    assert score_study_task(study.pk, run.pk) == run.pk
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == (f"Not scored: sue, who asked for this run, may no longer score this study (study "
                         f"{study.pk}: not found or not yours to score (a study you own or that is shared with you).)")
    assert run.results == {}
    assert UnitScore.objects.filter(study=study, score_run__isnull=False).count() == scored_before


def test_a_run_whose_requester_was_deleted_or_deactivated_acts_for_nobody(study, owner,
                                                                         django_capture_on_commit_callbacks):
    from scoring.tasks import score_study_task

    deleted, deactivated = (_user(name, "scoring.add_scorerun") for name in ("del", "dea"))
    for user in (deleted, deactivated):
        study_share(study=study, user=owner, with_user=user)
    gone_run = _queued(study, deleted, django_capture_on_commit_callbacks)
    deleted.delete()  # its run, already queued, stands for nobody: the next request queues its own
    idle_run = _queued(study, deactivated, django_capture_on_commit_callbacks)
    assert idle_run.pk != gone_run.pk
    deactivated.is_active = False
    deactivated.save(update_fields=["is_active"])
    for run in (gone_run, idle_run):
        score_study_task(study.pk, run.pk)
        run.refresh_from_db()
    assert (gone_run.status, gone_run.by_operator, gone_run.requested_by) == ("failed", False, None)
    assert gone_run.error == "Not scored: the account that asked for this run was deleted; nobody may act for it."
    assert (idle_run.status, idle_run.error) == ("failed", "Not scored: dea, who asked for this run, has a "
                                                           "deactivated account.")


def test_the_owners_and_the_operators_queued_runs_are_computed(study, owner, django_capture_on_commit_callbacks):
    from scoring.tasks import score_study_task
    from tests.work import work

    work(study, "w1")
    runs = []
    for user in (owner, None):  # one after the other: a study being scored is not queued twice
        runs.append(run := _queued(study, user, django_capture_on_commit_callbacks))
        score_study_task(study.pk, run.pk)
        run.refresh_from_db()
    assert runs[1].by_operator is True
    assert [(run.status, run.error) for run in runs] == [("done", "")] * 2
