"""A scoring request joins a pending run only when that run acts for the same principal (the same
requesting user, or the operator for the operator): ``score_run_enqueue``. A run is computed only
while its one requester may still score the study, so before, an owner's "Score again" that joined
a reader's pending run (the API's 200, the admin's "already being scored ... Its results will be
the study's latest") was lost when the reader's share was revoked or their account deactivated: the
run failed for the reader and the owner's request had no run of its own."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from scoring.models import ScoreRun
from scoring.selectors import score_run_latest
from scoring.services import score_run_enqueue
from scoring.tasks import score_study_task
from studies.api.tokens import api_token_create
from studies.services.sharing import study_share, study_unshare
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db
API = "/api/v1/score-runs/"
Status = ScoreRun.Status


def _user(name: str):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    return grant(user, "studies.view_study", "scoring.view_scorerun", "scoring.add_scorerun")


@pytest.fixture
def owner():
    return _user("olga")


@pytest.fixture
def study(owner, settings):
    settings.RL_SCORING_SIMILARITY = False
    study = open_utility_study(name="joined", n_items=1, n_sources=1, quota=1, owner=owner)
    work(study, "w1")
    return study


@pytest.fixture
def reader(study, owner):
    rita = _user("rita")
    study_share(study=study, user=owner, with_user=rita)  # VIEW: she may score it
    return rita


def _api(user) -> APIClient:
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _runs(study):
    return {run.requested_by.username if run.requested_by else None: (run.status, run.error[:40])
            for run in ScoreRun.objects.filter(study=study).select_related("requested_by")}


def _lose_the_share(study, owner, reader):
    study_unshare(study=study, user=owner, with_user=reader)


def _lose_the_account(study, owner, reader):
    reader.is_active = False
    reader.save(update_fields=["is_active"])


@pytest.mark.parametrize("lose", [_lose_the_share, _lose_the_account])
def test_the_owners_request_survives_the_readers_run_failing(study, owner, reader, lose,
                                                            django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as sent:
        hers = score_run_enqueue(study=study, user=reader)
        answer = _api(owner).post(API, {"study": study.pk}, format="json")
    # The owner's request is not answered with the reader's run: it queues one of its own.
    assert (answer.status_code, "detail" in answer.json(), len(sent)) == (202, False, 2)
    mine = ScoreRun.objects.get(pk=answer.json()["id"])
    assert (mine.pk != hers.pk, mine.requested_by, mine.by_operator) == (True, owner, False)

    lose(study, owner, reader)
    score_study_task(study.pk, hers.pk)
    score_study_task(study.pk, mine.pk)
    runs = _runs(study)
    assert runs["olga"] == (Status.DONE, "")
    assert runs["rita"][0] == Status.FAILED and runs["rita"][1].startswith("Not scored: rita")
    assert score_run_latest(study=study).pk == mine.pk


def test_the_earlier_run_of_another_requester_is_superseded_when_the_later_finishes_first(
        study, owner, reader, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        hers = score_run_enqueue(study=study, user=reader)
        mine = score_run_enqueue(study=study, user=owner)
    score_study_task(study.pk, mine.pk)
    score_study_task(study.pk, hers.pk)
    hers.refresh_from_db()
    mine.refresh_from_db()
    assert (mine.status, hers.status) == (Status.DONE, Status.FAILED)
    assert hers.error.startswith(f"Superseded: run {mine.pk}, asked for after this one, finished first")
    assert score_run_latest(study=study).pk == mine.pk


def test_each_principal_joins_only_its_own_pending_run(study, owner, reader, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as sent:
        answers = [(who, score_run_enqueue(study=study, user=who))
                   for who in (reader, owner, None, reader, owner, None, owner)]
    firsts = {(getattr(who, "pk", None)): run.pk for who, run in answers[:3]}
    assert len(set(firsts.values())) == 3 and len(sent) == 3  # one run, one task per principal
    assert [run.already_queued for _, run in answers] == [False] * 3 + [True] * 4
    assert all(run.pk == firsts[getattr(who, "pk", None)] for who, run in answers)
    operators = ScoreRun.objects.get(pk=firsts[None])
    assert (operators.requested_by, operators.by_operator) == (None, True)
