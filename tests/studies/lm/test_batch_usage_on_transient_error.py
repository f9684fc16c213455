"""A batch that ends in a ``TransientBackendError`` (the endpoint gave out: 503s past the retries)
stores the budget usage it spent before re-raising (``ItemHandler.run_batch``), as a batch ending
in any other backend error does: a resumed job counts those requests against ``max_requests`` and
never sends more than the cap."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from studies.lm.backends import TransientBackendError
from studies.models import GenerationJob, RationaleSource
from studies.services.generation import generation_job_create, generation_job_resume, generation_job_run_batch
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY, _train_pool

pytestmark = pytest.mark.django_db

MAX_REQUESTS = 8


def test_a_batch_failing_on_a_503_keeps_the_requests_it_spent_and_a_resume_stays_within_the_cap():
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(3):
        ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    state = {"n": 0, "down": True}

    def reply(path, body):
        """Two answers, then 503 until the endpoint is back up."""
        state["n"] += 1
        if state["n"] <= 2 or not state["down"]:
            return 200, completion([RATIONALE_REPLY]), {}
        return 503, {"error": "busy"}, {}

    root = get_user_model().objects.create_superuser("root", password="pw")
    with OpenAIServer(reply) as server:
        source = RationaleSource.objects.create(
            name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1, "max_retries": 3})
        job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                    enqueue=False, batch_size=3, params={"max_requests": MAX_REQUESTS})
        with pytest.raises(TransientBackendError):
            generation_job_run_batch(job_id=job.pk)
        job.refresh_from_db()
        sent_first = len(server.requests)
        assert sent_first > 2  # the two answers and the retried 503s
        assert job.status == GenerationJob.Status.FAILED
        assert job.params["usage"]["used_requests"] == sent_first

        state["down"] = False
        generation_job_resume(job=job, user=root, enqueue=False)
        while generation_job_run_batch(job_id=job.pk):
            pass
        job.refresh_from_db()
    assert len(server.requests) <= MAX_REQUESTS
    assert job.params["usage"]["used_requests"] == len(server.requests)
    # The resumed batch re-sends its three items and meets the cap it had mostly spent already.
    assert job.status == GenerationJob.Status.FAILED
    assert job.error == f"budget cap reached: {MAX_REQUESTS} of {MAX_REQUESTS} requests used"
