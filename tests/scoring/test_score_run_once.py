"""A study already being scored is not queued again: ``score_run_enqueue`` returns its pending or
running run (decided under a lock of the study's row), and the API, the admin's "Score now" (which
the study page's "Score again" posts to) and the outcomes import's "Score it now" say so. Before, a
view-share holder queued ten runs of the owner's study (the API's 202 five times, the admin five)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scoring.models import ScoreRun
from scoring.services import score_run_enqueue
from scoring.services.runs import already_being_scored, score_run_start
from scoring.tasks import score_study_task
from studies.api.tokens import api_token_create
from studies.models import Study
from studies.services.sharing import study_share, study_unshare
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db
API = "/api/v1/score-runs/"
ALREADY = "is already being scored"


def _user(name: str, *perms: str):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    return grant(user, "studies.view_study", "scoring.view_scorerun", "scoring.add_scorerun", *perms)


@pytest.fixture
def owner():
    return _user("olga", "studies.change_study")


@pytest.fixture
def study(owner, settings):
    settings.RL_SCORING_SIMILARITY = False
    study = open_utility_study(name="once", n_items=1, n_sources=1, quota=1, owner=owner)
    work(study, "w1")
    return study


@pytest.fixture
def shared(study, owner):
    sue = _user("sue")
    study_share(study=study, user=owner, with_user=sue)  # VIEW: she may score it
    return sue


def _api(user):
    from rest_framework.test import APIClient

    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _admin(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_api_and_the_admin_queue_one_run_of_a_study_being_scored(study, shared,
                                                                     django_capture_on_commit_callbacks):
    api, admin = _api(shared), _admin(shared)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        answers = [api.post(API, {"study": study.pk}, format="json") for _ in range(5)]
        pages = [admin.post(reverse("admin:scoring_scorerun_score"), {"study": study.pk}) for _ in range(5)]
    run = ScoreRun.objects.get(study=study)  # one run, one task sent
    assert len(sent) == 1 and run.status == ScoreRun.Status.PENDING and run.requested_by == shared
    assert [a.status_code for a in answers] == [202] + [200] * 4
    assert {a.json()["id"] for a in answers} == {run.pk}
    assert "detail" not in answers[0].json()
    assert answers[1].json()["detail"] == already_being_scored(run)
    assert already_being_scored(run) == (f"Study {study.name} {ALREADY} (run {run.pk}, pending); no second run "
                                         "was started. Its results will be the study's latest.")
    state = reverse("admin:scoring_scorerun_state", args=[run.pk])
    assert {(p.status_code, p["Location"]) for p in pages} == {(302, state)}
    shown = [str(m) for m in get_messages(pages[-1].wsgi_request)]
    assert any(ALREADY in m for m in shown), shown
    assert ALREADY in admin.get(state).content.decode()

    # Running (a worker took it and read the answers): a request now asks for the answers since, so
    # it queues a new run (which supersedes the running one where it stores).
    assert score_run_start(run_id=run.pk, study_id=study.pk).status == ScoreRun.Status.RUNNING
    with django_capture_on_commit_callbacks(execute=False) as sent:
        again = api.post(API, {"study": study.pk}, format="json")
    assert (again.status_code, again.json()["status"], len(sent)) == (202, "pending", 1)
    assert again.json()["id"] != run.pk


def test_a_pending_run_last_queued_longer_ago_than_the_stall_time_does_not_stand_for_the_study(
        study, owner, settings, django_capture_on_commit_callbacks):
    # Its task may be lost (a flushed broker) and beat is not sending it again (beat touches a pending
    # run it sends again: tests/scoring/test_score_runs.py), so nothing else would ever start it.
    with django_capture_on_commit_callbacks(execute=False):
        lost = score_run_enqueue(study=study, user=owner)
    long_ago = timezone.now() - timedelta(seconds=settings.RL_SCORE_STALL_SECONDS + 1)
    ScoreRun.objects.filter(pk=lost.pk).update(created_at=long_ago, updated_at=long_ago)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        fresh = score_run_enqueue(study=study, user=owner)
    assert (fresh.pk != lost.pk, fresh.already_queued, len(sent)) == (True, False, 1)


def test_once_the_run_is_finished_the_next_request_queues_a_new_one(study, owner, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        first = score_run_enqueue(study=study, user=owner)
    assert first.already_queued is False
    score_study_task(study.pk, first.pk)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        response = _api(owner).post(API, {"study": study.pk}, format="json")
    assert response.status_code == 202 and response.json()["id"] != first.pk and len(sent) == 1
    assert ScoreRun.objects.filter(study=study, status=ScoreRun.Status.PENDING).count() == 1


def test_a_pending_run_whose_requester_lost_the_right_does_not_stand_for_the_study(
        study, owner, shared, django_capture_on_commit_callbacks):
    # Sue's run will fail when a worker starts it (her share is gone): the owner's request is not
    # answered with it, a run of her own is queued.
    with django_capture_on_commit_callbacks(execute=False):
        hers = score_run_enqueue(study=study, user=shared)
    study_unshare(study=study, user=owner, with_user=shared)
    with django_capture_on_commit_callbacks(execute=False):
        mine = score_run_enqueue(study=study, user=owner)
    assert mine.pk != hers.pk and (mine.requested_by, mine.already_queued) == (owner, False)


def test_the_outcomes_imports_score_it_now_says_the_study_is_already_being_scored(
        admin_client, strategyqa_test_items, utility_file, tmp_path, django_capture_on_commit_callbacks):
    admin = admin_client  # the operator's dataset: a superuser imports into it
    path = tmp_path / "outcomes.json"
    path.write_text("\n".join(utility_file.read_text().splitlines()[:3]) + "\n")
    url = reverse("admin:scoring_scorerun_import_outcomes")

    def post():
        with django_capture_on_commit_callbacks(execute=False):
            return admin.post(url, {"file": SimpleUploadedFile("outcomes.json", path.read_bytes()),
                                    "dataset": strategyqa_test_items.pk, "split": "test", "study": "elsewhere",
                                    "score": "on"})

    first = post()
    assert first.status_code == 302, first.content.decode()[-3000:]
    run = ScoreRun.objects.get(study=Study.objects.get(name="elsewhere"))
    state = reverse("admin:scoring_scorerun_state", args=[run.pk])
    assert first.status_code == 302 and first["Location"] == state
    assert not any(ALREADY in str(m) for m in get_messages(first.wsgi_request))
    again = post()
    assert (again.status_code, again["Location"]) == (302, state)
    assert ScoreRun.objects.filter(study__name="elsewhere").count() == 1
    assert already_being_scored(run) in [str(m) for m in get_messages(again.wsgi_request)]
