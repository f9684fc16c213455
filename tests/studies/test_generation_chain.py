"""An LM job runs as one chain of messages however often it is queued again (``GenerationJob.chain``).

Before: a job waiting in line (the one ``lm`` worker busy with a long fine-tune, or down) was taken
by beat's stalled-job check for one whose message was lost and got another message every
``RL_LM_STALL_SECONDS``: four messages in an hour, each of which later ran a batch and queued its
next, so the job ran as several chains side by side (ahead of the jobs behind it, and sending the
same items' requests twice where workers run in parallel). Now each message carries the job's chain
token, drawn anew whenever the job is queued, and a message carrying an old one does nothing.

The messages go through a real (in-memory) broker and are delivered by calling the task with each
message's arguments, as a worker would; requests are counted at a local OpenAI-compatible endpoint."""
from __future__ import annotations

from datetime import timedelta

import kombu.pools
import pytest
from django.contrib.auth import get_user_model

from config.celery import app
from studies.models import GenerationJob, Rationale, RationaleSource
from studies.services.generation import generation_job_create, generation_job_resume
from studies.services.generation.jobs import RUN_TASK, generation_jobs_resume_stalled
from studies.tasks import run_generation_job
from tests.clock import clock_installed
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.lm.openai_server import OpenAIServer, completion
from tests.studies.lm.test_job_rights import RATIONALE_REPLY, _train_pool

STALL = timedelta(seconds=900)  # RL_LM_STALL_SECONDS's default
N_ITEMS, BATCH = 6, 2  # three batches, one request an item


def _reset_broker_pools():
    kombu.pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker():
    """Tasks sent for real (not run inline) to an in-memory broker, which the test reads."""
    saved = app.conf.broker_url, app.conf.task_always_eager
    app.conf.broker_url, app.conf.task_always_eager = "memory://", False
    _reset_broker_pools()
    _taken()  # an empty queue to start from
    yield
    app.conf.broker_url, app.conf.task_always_eager = saved
    _reset_broker_pools()


def _taken() -> list[list]:
    """The arguments of the messages waiting on the ``lm`` queue, in the order sent, taken off it."""
    args = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.amqp.queues["lm"])
        while True:
            try:
                message = queue.get(block=False)
            except queue.Empty:
                return args
            assert message.headers["task"] == RUN_TASK
            args.append(message.payload[0])
            message.ack()


def _job(server, django_capture_on_commit_callbacks) -> GenerationJob:
    """A rationale job of six dev items on a hosted source, two items a batch, as an admin starts
    it (queued at commit)."""
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(N_ITEMS):
        ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    source = RationaleSource.objects.create(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
        decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1, "max_retries": 1})
    with django_capture_on_commit_callbacks(execute=True):
        return generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                     batch_size=BATCH, params={"max_requests": 100})


def _resend_stalled(clock, django_capture_on_commit_callbacks) -> list[int]:
    """A quarter of an hour on, beat's stalled-job check (what it sends, at commit)."""
    clock.advance(minutes=16)
    with django_capture_on_commit_callbacks(execute=True):
        return generation_jobs_resume_stalled(stalled_after=STALL)


def _deliver(args: list) -> list[list]:
    """A worker runs the message with ``args``; returns the messages it queued."""
    run_generation_job(*args)
    return _taken()


def _run_chain(message: list, server) -> int:
    """Deliver ``message`` and each next message of its chain; each queues at most one. Returns
    how many batches ran (each sends two requests)."""
    batches = 0
    while message is not None:
        before = len(server.requests)
        queued = _deliver(message)
        assert len(server.requests) == before + BATCH
        batches += 1
        assert len(queued) <= 1
        message = queued[0] if queued else None
    return batches


@pytest.mark.django_db
def test_a_queued_job_sent_again_while_it_waits_runs_as_one_chain(
        broker, monkeypatch, django_capture_on_commit_callbacks):
    clock = clock_installed(monkeypatch)
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        # The lm worker is busy elsewhere: the job waits in line and beat sends it again, twice.
        assert _resend_stalled(clock, django_capture_on_commit_callbacks) == [job.pk]
        assert _resend_stalled(clock, django_capture_on_commit_callbacks) == [job.pk]
        first, second, newest = _taken()
        assert first[0] == second[0] == newest[0] == job.pk
        # The worker frees up and takes the three messages in the order sent: the two older ones
        # do nothing (no request, no next message), the newest runs the job to its end.
        for old in (first, second):
            assert _deliver(old) == []
            assert len(server.requests) == 0
        job.refresh_from_db()
        assert (job.status, job.started_at, job.done) == (GenerationJob.Status.QUEUED, None, 0)
        assert _run_chain(newest, server) == N_ITEMS // BATCH
    job.refresh_from_db()
    assert (job.status, job.done) == (GenerationJob.Status.DONE, N_ITEMS)
    assert len(server.requests) == N_ITEMS
    assert job.params["usage"]["used_requests"] == N_ITEMS
    assert Rationale.objects.filter(source=job.source).count() == N_ITEMS


@pytest.mark.django_db
def test_an_old_message_that_arrives_after_the_newest_started_does_nothing(
        broker, monkeypatch, django_capture_on_commit_callbacks):
    """A lost message is sent again (the filesystem broker never redelivers), then shows up after
    all (Redis redelivers it): it dies at once, whatever the job's state."""
    clock = clock_installed(monkeypatch)
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        assert _resend_stalled(clock, django_capture_on_commit_callbacks) == [job.pk]
        lost, newest = _taken()
        (following,) = _deliver(newest)  # the first batch ran; the job is running
        assert len(server.requests) == BATCH
        assert _deliver(lost) == []
        assert len(server.requests) == BATCH
        assert _run_chain(following, server) == N_ITEMS // BATCH - 1
    assert GenerationJob.objects.get(pk=job.pk).status == GenerationJob.Status.DONE
    assert len(server.requests) == N_ITEMS


@pytest.mark.django_db
def test_a_job_resumed_by_its_admin_leaves_the_chain_it_had_behind(
        broker, monkeypatch, django_capture_on_commit_callbacks):
    """'Resume job' on a job that waits in line (or whose worker froze) starts its one chain anew."""
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        with django_capture_on_commit_callbacks(execute=True):
            generation_job_resume(job=job, user=job.created_by)
        old, resumed = _taken()
        assert _deliver(old) == []
        assert _run_chain(resumed, server) == N_ITEMS // BATCH
    assert len(server.requests) == N_ITEMS


@pytest.mark.django_db
def test_a_message_queued_before_chain_tokens_still_runs_as_the_jobs_chain(
        broker, monkeypatch, django_capture_on_commit_callbacks):
    """At the upgrade, messages in flight carry no token: such a message runs its batch, and its
    next message carries the job's chain, now its own (a message sent before it does nothing)."""
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (sent,) = _taken()
        (following,) = _deliver([job.pk])  # an upgrade's message: the job's id only
        assert len(server.requests) == BATCH
        assert following == [job.pk, GenerationJob.objects.get(pk=job.pk).chain]
        assert _deliver(sent) == []  # the chain the upgrade's message took over
        assert len(server.requests) == BATCH
        assert _run_chain(following, server) == N_ITEMS // BATCH - 1
    assert GenerationJob.objects.get(pk=job.pk).status == GenerationJob.Status.DONE
    assert len(server.requests) == N_ITEMS
