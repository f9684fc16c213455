"""A message of an LM job delivered again after its batch queued the next one does nothing.

Before: a batch's next message carried the same chain token as the message that ran the batch, so
a copy of that message (tasks are ``acks_late``: a worker that dies after queueing the next
message, before acking its own, has it redelivered) passed the token check and queued a next
message of its own: two live chains, and with two ``lm`` workers the rest of the job's requests
sent, and charged against its budget, twice. Now the batch advances the job's token as it hands on
(``jobs._hand_on``) and the next message carries the new one. A message whose worker died
mid-batch, before handing on, still finds its token and runs the batch again, and a message lost
for good is still sent again by the stalled-job check.

Messages go through the in-memory broker of ``test_generation_chain``, delivered as a worker would."""
from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections

from studies.models import GenerationJob, Rationale
from studies.services.generation.jobs import (
    HANDLERS,
    MAX_BATCH_STARTS,
    generation_job_resume,
    generation_job_run_message,
)
from tests.clock import clock_installed
from tests.studies.lm.openai_server import OpenAIServer, completion
from tests.studies.lm.test_job_rights import RATIONALE_REPLY
from tests.studies.test_generation_chain import (
    BATCH,
    N_ITEMS,
    _deliver,
    _job,
    _resend_stalled,
    _run_chain,
    _taken,
    broker,  # noqa: F401 (a fixture)
)


def _reply(path, body):
    return 200, completion([RATIONALE_REPLY]), {}


def _prompts(server) -> list[str]:
    return [json.dumps(request["json"], sort_keys=True) for request in server.requests]


def _sent_once(server, job):
    job.refresh_from_db()
    assert (job.status, job.done) == (GenerationJob.Status.DONE, N_ITEMS)
    assert len(server.requests) == N_ITEMS
    assert len(set(_prompts(server))) == N_ITEMS  # each item's prompt once
    assert job.params["usage"]["used_requests"] == N_ITEMS
    assert Rationale.objects.filter(source=job.source).count() == N_ITEMS


class WorkerLost(BaseException):
    """The worker process killed (no ``except Exception`` sees it): the message is not acked."""


def _delivered_to_dying_workers(monkeypatch, job, message, *, times: int) -> None:
    """Deliver ``message`` ``times`` times, each to a worker killed mid-batch (nothing acked)."""
    def dies(job):
        raise WorkerLost

    with monkeypatch.context() as patch:
        patch.setattr(HANDLERS[job.kind], "run_batch", dies)
        for _ in range(times):
            with pytest.raises(WorkerLost):
                _deliver(message)


@pytest.mark.django_db
def test_a_message_delivered_again_after_its_batch_queued_the_next_does_nothing(
        broker, django_capture_on_commit_callbacks):  # noqa: F811
    with OpenAIServer(_reply) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (first,) = _taken()
        (following,) = _deliver(first)  # batch one ran and queued the next; the worker died before the ack
        assert len(server.requests) == BATCH
        assert following[1] != first[1]
        assert _deliver(first) == []  # redelivered: no request, no second chain
        assert len(server.requests) == BATCH
        assert _run_chain(following, server) == N_ITEMS // BATCH - 1
        _sent_once(server, job)


@pytest.mark.django_db
def test_the_same_message_run_twice_hands_on_once(broker, django_capture_on_commit_callbacks):  # noqa: F811
    """The service itself: the second run of a message whose batch handed on returns no token."""
    with OpenAIServer(_reply) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (first,) = _taken()
        chain = first[1]
        following = generation_job_run_message(job_id=job.pk, chain=chain)
        assert following == chain + 1 == GenerationJob.objects.get(pk=job.pk).chain
        assert generation_job_run_message(job_id=job.pk, chain=chain) is None
        assert GenerationJob.objects.get(pk=job.pk).chain == following
        while following is not None:
            following = generation_job_run_message(job_id=job.pk, chain=following)
        _sent_once(server, job)


@pytest.mark.django_db
def test_a_message_whose_worker_died_mid_batch_runs_the_batch_when_redelivered(
        broker, monkeypatch, django_capture_on_commit_callbacks):  # noqa: F811
    with OpenAIServer(_reply) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (first,) = _taken()
        _delivered_to_dying_workers(monkeypatch, job, first, times=1)
        assert _taken() == [] and len(server.requests) == 0
        (following,) = _deliver(first)  # reject_on_worker_lost: the same message again
        assert len(server.requests) == BATCH
        assert _run_chain(following, server) == N_ITEMS // BATCH - 1
        _sent_once(server, job)


@pytest.mark.django_db
def test_a_batch_that_kills_its_worker_every_time_fails_the_job_after_the_last_start(
        broker, monkeypatch, django_capture_on_commit_callbacks):  # noqa: F811
    """A batch that kills its worker each time (out of memory) was redelivered at once and queued
    again by beat for ever, a worker killed each time. It is started ``MAX_BATCH_STARTS`` times, then
    the job fails saying why; resumed (with a smaller batch, say) it starts afresh and finishes."""
    with OpenAIServer(_reply) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (first,) = _taken()
        # reject_on_worker_lost: the same message, again and again
        _delivered_to_dying_workers(monkeypatch, job, first, times=MAX_BATCH_STARTS)
        assert _deliver(first) == [] and len(server.requests) == 0
        job.refresh_from_db()
        assert job.status == GenerationJob.Status.FAILED
        assert f"the LM worker stopped {MAX_BATCH_STARTS} times in the same batch" in job.error

        with django_capture_on_commit_callbacks(execute=True):
            generation_job_resume(job=job, user=job.created_by)
        (resumed,) = _taken()
        (second,) = _deliver(resumed)
        assert GenerationJob.objects.get(pk=job.pk).batch_starts == 0  # a batch that hands on starts the count anew
        assert _run_chain(second, server) == N_ITEMS // BATCH - 1
        _sent_once(server, job)


@pytest.mark.django_db
def test_a_message_lost_mid_batch_is_sent_again_by_the_stalled_job_check(
        broker, monkeypatch, django_capture_on_commit_callbacks):  # noqa: F811
    """The filesystem broker never redelivers: beat's check sends a new chain, and the lost message,
    should it show up after all, does nothing."""
    clock = clock_installed(monkeypatch)
    with OpenAIServer(_reply) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (first,) = _taken()
        (second,) = _deliver(first)
        lost = second  # its worker dies mid-batch and the broker loses it
        assert _resend_stalled(clock, django_capture_on_commit_callbacks) == [job.pk]
        (resent,) = _taken()
        assert _run_chain(resent, server) == N_ITEMS // BATCH - 1
        assert _deliver(lost) == [] and _deliver(first) == []
        _sent_once(server, job)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_copies_of_a_message_at_once_leave_one_chain(broker, django_capture_on_commit_callbacks):  # noqa: F811
    """Two workers run copies of the same message side by side: only one hands on (one conditional
    UPDATE), so the job goes on as one chain. Both copies may send the batch's requests (stored items
    are skipped, the budget reads what each spent): that one batch at most."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    with OpenAIServer(_reply) as server:
        job = _job(server, django_capture_on_commit_callbacks)
        (first,) = _taken()
        start = threading.Barrier(2)
        handed_on = []

        def copy():
            try:
                start.wait()
                handed_on.append(generation_job_run_message(job_id=job.pk, chain=first[1]))
            finally:
                connections.close_all()

        workers = [threading.Thread(target=copy) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        assert sorted(handed_on, key=str) == [first[1] + 1, None]
        batch_one = len(server.requests)
        assert BATCH <= batch_one <= 2 * BATCH
        following = first[1] + 1
        while following is not None:
            following = generation_job_run_message(job_id=job.pk, chain=following)
        job.refresh_from_db()
        assert (job.status, job.done) == (GenerationJob.Status.DONE, N_ITEMS)
        assert len(server.requests) - batch_one == N_ITEMS - BATCH  # the rest sent once
        assert job.params["usage"]["used_requests"] == len(server.requests)
