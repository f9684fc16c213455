"""A batch of an LM job that runs long, and beat's stall detection (``generation_jobs_resume_stalled``):
a running batch keeps its job alive, and when two copies of one batch do run (a worker frozen past
``RL_LM_STALL_SECONDS``, then woken), every request they send counts once in the job's usage and
against its ``max_requests`` cap, and the outputs of the copy that stores first are the ones kept."""
from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from studies.models import (
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    QuestionGenerator,
    Rationale,
    RationaleSource,
)
from studies.services.generation import generation_job_create, generation_job_run_batch
from studies.services.generation.jobs import HANDLERS, generation_jobs_resume_stalled
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.lm.openai_server import OpenAIServer, completion
from tests.studies.lm.test_job_rights import RATIONALE_REPLY, _train_pool

STALL = timedelta(seconds=900)  # RL_LM_STALL_SECONDS's default


def _hosted_job(server, *, params: dict, n_items: int = 6) -> GenerationJob:
    """A rationale job of ``n_items`` dev items on a hosted (OpenAI-compatible) source, all in one
    batch, one request an item, as an admin starts it."""
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(n_items):
        ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    source = RationaleSource.objects.create(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
        decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1, "max_retries": 1})
    return generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                 enqueue=False, batch_size=n_items, params=params)


def _hosted_question_job(server) -> GenerationJob:
    """A generalization question job of two dev items on a hosted generator that samples (one
    question a request: three requests an item, one per type), in one batch, as an admin starts it."""
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(2):
        ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    generator = QuestionGenerator.objects.create(
        name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
        decoding={"do_sample": True, "temperature": 1.0, "num_return_sequences": 1, "backoff_s": 0.01,
                  "concurrency": 1})
    return generation_job_create(kind="generalization_questions", generator=generator, dataset=dataset, split="dev",
                                 user=root, limit=2, batch_size=2, enqueue=False)


def _sampled_questions(*, unparseable_first: int = 0, empty_first: int = 0):
    """An endpoint that samples: each request gets another question (``Is river N longer than the
    Nile?``, N counting requests from 1); the first ``empty_first`` get an empty text, and the
    first ``unparseable_first`` (counting those) no question at all."""
    count = itertools.count(1)

    def reply(path, body):
        n = next(count)
        text = ("" if n <= empty_first else "no question here" if n <= unparseable_first
                else f" Is river {n} longer than the Nile?\nAnswer: yes")
        return 200, completion([text]), {}

    return reply


def _second_copy_while_first_is_frozen(monkeypatch, kind: str = "rationales") -> dict:
    """While the first copy of the job's batch is about to send its requests, its worker stops
    (frozen) for longer than the stall limit: beat queues the job again and another lm worker runs
    the batch (the second copy). Then the first copy wakes up and goes on."""
    handler = HANDLERS[kind]
    real = type(handler).generate
    state = {"depth": 0, "requeued": None}

    def generate(self, job, item_ids):
        state["depth"] += 1
        if state["depth"] == 1:
            GenerationJob.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(hours=1))
            state["requeued"] = generation_jobs_resume_stalled(stalled_after=STALL, enqueue=False)
            generation_job_run_batch(job_id=job.pk)  # the second copy, on another worker
        return real(self, job, item_ids)

    monkeypatch.setattr(type(handler), "generate", generate)
    return state


@pytest.mark.django_db
def test_a_second_copy_of_a_batch_does_not_go_past_the_request_cap(monkeypatch):
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _hosted_job(server, params={"max_requests": 6})
        state = _second_copy_while_first_is_frozen(monkeypatch)
        generation_job_run_batch(job_id=job.pk)  # the first copy
    job.refresh_from_db()
    assert state["requeued"] == [job.pk]
    # The second copy spent the whole cap; the first, woken, sees that before it sends anything.
    assert len(server.requests) == 6
    assert job.params["usage"]["used_requests"] == 6
    assert (job.status, job.done) == (GenerationJob.Status.DONE, 6)
    assert Rationale.objects.filter(source=job.source).count() == 6


@pytest.mark.django_db
def test_two_copies_of_a_batch_each_add_their_requests_to_the_usage(monkeypatch):
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY], tokens=7), {})) as server:
        job = _hosted_job(server, params={"max_requests": 100})
        _second_copy_while_first_is_frozen(monkeypatch)
        generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    # Both copies sent the batch's six requests (the first had picked its items before the second
    # stored them); the outputs are stored once, and every request sent is counted.
    assert len(server.requests) == 12
    assert job.params["usage"]["used_requests"] == 12
    assert job.params["usage"]["used_tokens"] == 12 * 7
    assert Rationale.objects.filter(source=job.source).count() == 6
    assert (job.status, job.done) == (GenerationJob.Status.DONE, 6)


@pytest.mark.django_db
def test_two_copies_of_a_question_batch_store_one_set_of_questions(monkeypatch):
    with OpenAIServer(_sampled_questions()) as server:
        job = _hosted_question_job(server)
        state = _second_copy_while_first_is_frozen(monkeypatch, kind="generalization_questions")
        generation_job_run_batch(job_id=job.pk)  # the first copy
    job.refresh_from_db()
    assert state["requeued"] == [job.pk]
    # Both copies sent the batch's six requests, each counted once; the second copy stored first
    # (requests 1 to 6), and the first copy's other questions for the same items are not added.
    assert len(server.requests) == 12
    assert job.params["usage"]["used_requests"] == 12
    questions = GeneralizationQuestion.objects.filter(origin=job.generator.origin)
    assert questions.count() == 6
    assert sorted(questions.values_list("text", flat=True)) == sorted(
        f"Is river {n} longer than the Nile?" for n in range(1, 7))
    assert sorted(questions.values_list("item_id", "qtype")) == sorted(
        (item_id, qtype) for item_id in job.item_ids for qtype in ("rephrase", "similar", "counterfactual"))
    assert (job.status, job.done, job.total, job.failed) == (GenerationJob.Status.DONE, 2, 2, 0)


@pytest.mark.django_db
def test_a_question_batch_a_copy_stored_as_failures_takes_the_other_copys_questions(monkeypatch):
    # The second copy's endpoint gave nothing parseable: it stores every item as failed. The first
    # copy, woken, gets questions for the same items: a failure is no output, so they are stored
    # (as a later copy's rationale is over an earlier copy's failure), and the failures stay.
    with OpenAIServer(_sampled_questions(unparseable_first=6)) as server:
        job = _hosted_question_job(server)
        _second_copy_while_first_is_frozen(monkeypatch, kind="generalization_questions")
        generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    assert len(server.requests) == 12
    questions = GeneralizationQuestion.objects.filter(origin=job.generator.origin)
    assert sorted(questions.values_list("text", flat=True)) == sorted(
        f"Is river {n} longer than the Nile?" for n in range(7, 13))
    assert sorted(questions.values_list("item_id", "qtype")) == sorted(
        (item_id, qtype) for item_id in job.item_ids for qtype in ("rephrase", "similar", "counterfactual"))
    # The second copy's failures, once each (a sample's and its type's), and none of the first's.
    failures = GenerationFailure.objects.filter(job=job)
    assert failures.count() == 12
    assert set(failures.values_list("item_id", flat=True)) == set(job.item_ids)
    assert all("no question here" in f.raw_output for f in failures)
    # As a rationale job counts an item with a failure recorded and a rationale stored: done and failed.
    assert (job.status, job.done, job.failed) == (GenerationJob.Status.DONE, 2, 2)


@pytest.mark.django_db
def test_a_question_batch_whose_copies_both_fail_records_one_copys_failures(monkeypatch):
    # Neither copy's endpoint gave a question: the second copy's empty texts (an empty sample is
    # dropped: one failure a type, ``rephrase``), then the first copy's unparseable ones, which
    # would add a failure of their own a type (``rephrase#0``). The items' failures are the first stored.
    with OpenAIServer(_sampled_questions(empty_first=6, unparseable_first=12)) as server:
        job = _hosted_question_job(server)
        _second_copy_while_first_is_frozen(monkeypatch, kind="generalization_questions")
        generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    assert not GeneralizationQuestion.objects.filter(origin=job.generator.origin).exists()
    failures = GenerationFailure.objects.filter(job=job)
    assert sorted(failures.values_list("unit", flat=True)) == sorted(
        ["rephrase", "similar", "counterfactual"] * 2)
    assert not any("no question here" in f.raw_output for f in failures)
    assert (job.status, job.done, job.failed) == (GenerationJob.Status.DONE, 2, 2)


@pytest.mark.django_db(transaction=True)
def test_a_batch_longer_than_the_stall_limit_keeps_its_job_alive(monkeypatch, settings):
    settings.RL_LM_STALL_SECONDS = 0.3  # the batch's heartbeat: every 0.06 s
    handler = HANDLERS["rationales"]
    real = type(handler).generate
    seen = {}

    def slow_generate(self, job, item_ids):
        output = real(self, job, item_ids)  # the requests are sent ...
        time.sleep(1.0)  # ... and the batch goes on for more than three times the stall limit
        seen["requeued"] = generation_jobs_resume_stalled(stalled_after=timedelta(seconds=0.3), enqueue=False)
        seen["usage"] = GenerationJob.objects.get(pk=job.pk).params.get("usage")
        return output

    monkeypatch.setattr(type(handler), "generate", slow_generate)
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as server:
        job = _hosted_job(server, params={"max_requests": 10}, n_items=3)
        assert generation_job_run_batch(job_id=job.pk) is False
    assert seen["requeued"] == []  # beat leaves the running batch alone: no second copy
    # The heartbeat stored what the batch spent while it ran (a worker killed now would not lose it).
    assert seen["usage"]["used_requests"] == 3
    job.refresh_from_db()
    assert len(server.requests) == 3
    assert job.params["usage"]["used_requests"] == 3  # added once, not again when the batch stored
    assert (job.status, job.done) == (GenerationJob.Status.DONE, 3)
