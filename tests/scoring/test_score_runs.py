"""Score runs survive their worker and a broker that is down (issue 10 item 11).

Before: a worker killed with ``kill -9`` during ``score_study_task`` left its run ``running``; the
redelivered task saw ``running`` and returned, so the run stayed running forever. POST
``score-runs`` with the broker down answered 500 and left the run ``pending``."""
from __future__ import annotations

import time
from datetime import timedelta

import kombu.pools
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from config.celery import app
from scoring.models import ScoreRun
from scoring.services import ScoringQueueUnavailable, score_run_enqueue
from scoring.services import runs as runs_service
from scoring.services.runs import MAX_ATTEMPTS, heartbeat, score_run_start, score_runs_resume_stalled
from scoring.tasks import score_study_task
from studies.api.tokens import api_token_create
from tests.work import open_utility_study, work

# Nothing listens there (port 9 is "discard", closed on this machine and in CI).
DEAD_BROKER = "redis://127.0.0.1:9/0"


@pytest.fixture
def scored_study(db, settings):
    settings.RL_SCORING_SIMILARITY = False
    study = open_utility_study(name="runs", n_items=1, n_sources=1, quota=1, gold="yes")
    work(study, "PID0000000000000000000001")
    return study


def _reset_broker_pools():
    kombu.pools.reset()  # closes and forgets kombu's pools, so the next send opens a fresh one
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker_down():
    """The app's real broker connection pointed at an address where nothing listens, tasks sent
    for real (not run inline)."""
    saved = app.conf.broker_url, app.conf.task_always_eager
    app.conf.broker_url, app.conf.task_always_eager = DEAD_BROKER, False
    _reset_broker_pools()
    yield
    app.conf.broker_url, app.conf.task_always_eager = saved
    _reset_broker_pools()


def test_a_redelivered_task_takes_over_a_run_whose_worker_died(scored_study, settings):
    run = score_run_enqueue(study=scored_study, user=None)  # pending; sent at commit (the test never commits)
    # Worker A takes the run and is killed (kill -9): nothing more happens on its side.
    assert score_run_start(run_id=run.pk, study_id=scored_study.pk) is not None
    # The broker redelivers at once (reject_on_worker_lost): A's heartbeat is still fresh, so the
    # run may still be A's, and the delivery leaves it alone.
    assert score_study_task(scored_study.pk, run.pk) == run.pk
    run.refresh_from_db()
    assert (run.status, run.attempts) == (ScoreRun.Status.RUNNING, 1)
    # Later deliveries find A silent for longer than the stall limit: one takes the run over.
    settings.RL_SCORE_STALL_SECONDS = 0.05
    time.sleep(0.1)
    assert score_study_task(scored_study.pk, run.pk) == run.pk
    run.refresh_from_db()
    assert (run.status, run.attempts, run.error) == (ScoreRun.Status.DONE, 2, "")
    assert run.results["n_units_scored"] == 1
    # A done run is final: yet another delivery changes nothing.
    finished = run.finished_at
    assert score_study_task(scored_study.pk, run.pk) == run.pk
    run.refresh_from_db()
    assert (run.status, run.finished_at) == (ScoreRun.Status.DONE, finished)


def test_beat_queues_a_stalled_run_again_and_it_finishes(scored_study, django_capture_on_commit_callbacks):
    run = score_run_enqueue(study=scored_study, user=None)
    score_run_start(run_id=run.pk, study_id=scored_study.pk)  # taken by a worker that then dies
    assert score_runs_resume_stalled() == []  # its heartbeat is fresh: nothing to do yet

    later = timezone.now() + timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert score_runs_resume_stalled(now=later) == [run.pk]  # back to pending, sent (inline here)

    run.refresh_from_db()
    assert (run.status, run.attempts) == (ScoreRun.Status.DONE, 2)


def test_beat_queues_again_a_pending_run_whose_message_was_lost(scored_study, django_capture_on_commit_callbacks):
    """A run queued by a request whose process died between its commit and its send (here: the test
    never commits, so the message is never sent) waited as pending for good: beat looked only at
    running runs. Beat now queues a pending run again once no worker took it within the stall time."""
    run = score_run_enqueue(study=scored_study, user=None)
    assert score_runs_resume_stalled() == []  # queued just now: a worker may take it yet

    later = timezone.now() + timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert score_runs_resume_stalled(now=later) == [run.pk]  # sent again (inline here)

    run.refresh_from_db()
    assert (run.status, run.attempts) == (ScoreRun.Status.DONE, 1)


def test_a_request_after_beat_sent_its_pending_run_again_joins_that_run(scored_study):
    """A pending run beat sent again (its message perhaps lost) is the principal's queued run: a
    request made then joins it instead of queueing a second run of the same answers, as it did when
    the run was asked for longer ago than the stall time."""
    run = score_run_enqueue(study=scored_study, user=None)
    later = timezone.now() + timedelta(hours=1)
    assert score_runs_resume_stalled(now=later, enqueue=False) == [run.pk]  # sent again: touched now
    ScoreRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))

    again = score_run_enqueue(study=scored_study, user=None)

    assert (again.pk, again.already_queued) == (run.pk, True)
    assert ScoreRun.objects.filter(study=scored_study).count() == 1


def test_a_run_names_the_message_that_runs_it(scored_study):
    """Beat may queue a pending run again while its first message still waits: whichever message
    runs it is the one whose progress its page reads (``task_id``), not the last one sent."""
    run = score_run_enqueue(study=scored_study, user=None)  # its message never sent (no commit here)
    score_study_task.apply(args=(scored_study.pk, run.pk), task_id="the-message-that-ran")
    run.refresh_from_db()
    assert (run.status, run.task_id) == (ScoreRun.Status.DONE, "the-message-that-ran")


def test_beat_killed_between_moving_a_stalled_run_back_and_sending_it_sends_it_next_time(
        scored_study, django_capture_on_commit_callbacks, monkeypatch):
    run = score_run_enqueue(study=scored_study, user=None)
    score_run_start(run_id=run.pk, study_id=scored_study.pk)  # taken by a worker that then dies
    later = timezone.now() + timedelta(hours=1)

    class Killed(BaseException):
        pass

    def killed(run):
        raise Killed()

    with monkeypatch.context() as patch, pytest.raises(Killed):
        patch.setattr(runs_service, "_send", killed)
        score_runs_resume_stalled(now=later)  # moved back to pending, then beat's process dies
    run.refresh_from_db()
    assert run.status == ScoreRun.Status.PENDING

    with django_capture_on_commit_callbacks(execute=True):
        assert score_runs_resume_stalled(now=later + timedelta(hours=1)) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.attempts) == (ScoreRun.Status.DONE, 2)


def test_a_run_that_kills_its_worker_every_time_fails_after_the_last_attempt(scored_study, settings):
    run = score_run_enqueue(study=scored_study, user=None)
    settings.RL_SCORE_STALL_SECONDS = 0
    for _ in range(MAX_ATTEMPTS):
        assert score_run_start(run_id=run.pk, study_id=scored_study.pk) is not None  # and dies
    assert score_run_start(run_id=run.pk, study_id=scored_study.pk) is None
    run.refresh_from_db()
    assert run.status == ScoreRun.Status.FAILED
    assert f"died {MAX_ATTEMPTS} times" in run.error


@pytest.mark.django_db(transaction=True)
def test_a_running_worker_keeps_its_heartbeat():
    study = open_utility_study(name="beat", n_items=1, n_sources=1, quota=1)
    # A pending run as score_run_enqueue makes it for the operator (enqueueing here would run it inline at once).
    run = ScoreRun.objects.create(study=study, by_operator=True)
    run = score_run_start(run_id=run.pk, study_id=study.pk)
    first = ScoreRun.objects.get(pk=run.pk).updated_at
    with heartbeat(run, every=0.05):
        time.sleep(0.5)
    assert ScoreRun.objects.get(pk=run.pk).updated_at > first


def test_enqueue_with_the_broker_down_refuses_and_fails_the_run(
    scored_study, broker_down, django_capture_on_commit_callbacks
):
    started = time.monotonic()
    with pytest.raises(ScoringQueueUnavailable, match="task queue .* cannot be reached"):
        with django_capture_on_commit_callbacks(execute=True):
            score_run_enqueue(study=scored_study, user=None)
    assert time.monotonic() - started < 15
    run = ScoreRun.objects.get(study=scored_study)
    assert run.status == ScoreRun.Status.FAILED and "could not be reached" in run.error
    assert run.finished_at is not None


@pytest.mark.django_db(transaction=True)
def test_post_score_runs_with_the_broker_down_answers_503_and_leaves_nothing_pending(broker_down):
    study = open_utility_study(name="api-down", n_items=1, n_sources=1, quota=1)
    user = get_user_model().objects.create_superuser(username="root", password="pw-root-123")
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = client.post("/api/v1/score-runs/", {"study": study.pk}, format="json")

    assert response.status_code == 503, response.content
    assert "task queue (broker) cannot be reached" in response.json()["detail"]
    assert not ScoreRun.objects.filter(status=ScoreRun.Status.PENDING).exists()
    assert ScoreRun.objects.get(study=study).status == ScoreRun.Status.FAILED
