"""A job's ``max_tokens`` bounds it on an OpenAI-compatible endpoint that sends no ``usage`` (many
servers do not): each such response counts an upper estimate (``max_new_tokens`` x ``n`` plus
the prompt at 3 characters a token, rounded up: ``backends.estimated_tokens``), and the job's
stored usage says its token figure is estimated. An endpoint that sends usage keeps its exact
count. Jobs run through the worker's path against the local fake OpenAI server."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from studies.lm.backends import Budget, Decoding, OpenAIBackend
from studies.models import RationaleSource
from studies.services.generation import generation_job_create, generation_job_run_batch
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY, _train_pool

pytestmark = pytest.mark.django_db


def no_usage(texts: list[str]) -> dict:
    return {"object": "text_completion", "choices": [{"index": i, "text": t} for i, t in enumerate(texts)]}


def run_job(reply, *, max_new_tokens: int, params: dict):
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(10):
        ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    with OpenAIServer(reply) as server:
        source = RationaleSource.objects.create(
            name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_new_tokens": max_new_tokens, "concurrency": 1})
        job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                    enqueue=False, batch_size=5, params=params)
        while generation_job_run_batch(job_id=job.pk):
            pass
        job.refresh_from_db()
    return job, server


def test_a_job_on_an_endpoint_without_usage_stops_at_its_token_cap_and_says_the_count_is_estimated():
    job, server = run_job(lambda path, body: (200, no_usage([RATIONALE_REPLY]), {}),
                          max_new_tokens=400, params={"max_tokens": 100})
    assert len(server.requests) == 1  # 400 tokens (at least) counted for the first: no second request
    usage = job.params["usage"]
    assert usage["tokens_estimated"] is True
    prompt = server.requests[0]["json"]["prompt"]
    assert usage["used_tokens"] == 400 + -(-len(prompt) // 3)
    assert "budget cap reached" in job.error


def test_an_endpoint_that_sends_usage_keeps_its_exact_count():
    job, server = run_job(lambda path, body: (200, completion([RATIONALE_REPLY], tokens=7), {}),
                          max_new_tokens=400, params={"max_tokens": 1000})
    assert len(server.requests) == 10
    assert job.params["usage"]["used_tokens"] == 70
    assert job.params["usage"]["tokens_estimated"] is False


def test_the_estimate_counts_every_output_asked_and_the_prompt_rounded_up():
    from studies.lm.backends import estimated_tokens

    decoding = Decoding(max_new_tokens=50, num_return_sequences=3)
    assert estimated_tokens("x" * 10, decoding) == 150 + 4
    with OpenAIServer(lambda path, body: (200, no_usage(["a", "b", "c"]), {})) as server:
        backend = OpenAIBackend(endpoint_url=server.url, model="m", sleep=lambda d: None, concurrency=1,
                                budget=Budget(max_tokens=100))
        backend.generate(["x" * 10], decoding)
    assert backend.budget.as_json()["used_tokens"] == 154
    assert backend.budget.as_json()["tokens_estimated"] is True
