"""An LM output holding text no database can store (a lone surrogate, which no database can encode;
a NUL, which PostgreSQL refuses) fails its own item, not the batch: the other outputs are stored,
the bad one is kept as a GenerationFailure naming why (its raw output with those characters
replaced by U+FFFD), the job finishes, and running it again sends nothing. ``common.
unstorable_outputs_failed``, run by ``ItemHandler._store_batch``. Jobs run through the worker's
path against the local fake OpenAI server, which sends the character JSON-escaped as an endpoint would."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from studies.models import GenerationFailure, GenerationJob, Rationale, RationaleSource
from studies.services.generation import generation_job_create, generation_job_run_batch
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY, _train_pool

pytestmark = pytest.mark.django_db


def run_job_with_one_bad_output(bad: str):
    """A rationale job on five items whose third request is answered with ``bad`` in the output."""
    dataset = DatasetFactory(name="strategyqa")
    items = [ItemFactory(dataset=dataset, split="dev") for _ in range(5)]
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    replies = iter([RATIONALE_REPLY, RATIONALE_REPLY, RATIONALE_REPLY.replace("facts", f"fa{bad}cts"),
                    RATIONALE_REPLY, RATIONALE_REPLY])
    with OpenAIServer(lambda path, body: (200, completion([next(replies)]), {})) as server:
        source = RationaleSource.objects.create(
            name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_new_tokens": 40, "concurrency": 1, "backoff_s": 0.001})
        job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                    enqueue=False, batch_size=5)
        while generation_job_run_batch(job_id=job.pk):
            pass
        sent = len(server.requests)
        generation_job_run_batch(job_id=job.pk)  # once more, as a resume would: nothing left to send
        again = len(server.requests)
    job.refresh_from_db()
    return job, items, sent, again


@pytest.mark.parametrize(("bad", "why"), [("\ud800", "lone surrogate"), ("\x00", "NUL character")])
def test_an_unstorable_output_fails_its_item_and_the_rest_of_the_batch_is_stored(bad, why):
    job, items, sent, again = run_job_with_one_bad_output(bad)

    assert job.status == GenerationJob.Status.DONE, job.error
    assert Rationale.objects.filter(source=job.source).count() == 4
    failure = GenerationFailure.objects.get(job=job)
    assert failure.item_id == items[2].pk
    assert why in failure.reason and failure.reason.startswith("not stored: the rationale")
    assert "fa\ufffdcts" in failure.raw_output and bad not in failure.raw_output
    assert not Rationale.objects.filter(source=job.source, item=items[2]).exists()
    assert (job.done, job.failed) == (5, 1)
    assert sent == again == 5  # each item sent once: nothing is sent again


def test_an_unstorable_generated_question_fails_its_unit_and_the_other_questions_are_stored(
        dev_items, train_items, strategyqa_dataset):
    from studies.models import GeneralizationQuestion, QuestionGenerator

    from .test_openai_key_job_caps import QUESTION_DEMOS

    replies = iter(["Can whales fly?\nanswer: False", "Can pen\x00guins fly?\nanswer: False"]
                   + [f"Can fish {n} fly?\nanswer: False" for n in range(4)])
    with OpenAIServer(lambda path, body: (200, completion([next(replies)]), {})) as server:
        generator = QuestionGenerator.objects.create(
            name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"backoff_s": 0.001, "concurrency": 1}, demonstrations=QUESTION_DEMOS)
        job = generation_job_create(kind="generalization_questions", generator=generator, dataset=strategyqa_dataset,
                                    split="dev", limit=2, enqueue=False)
        while generation_job_run_batch(job_id=job.pk):
            pass
        assert len(server.requests) == 6
    job.refresh_from_db()

    assert job.status == GenerationJob.Status.DONE, job.error
    first = min(job.item_ids)
    assert GeneralizationQuestion.objects.filter(origin=generator.origin, item_id__in=job.item_ids).count() == 5
    failure = GenerationFailure.objects.get(job=job)
    assert (failure.item_id, failure.unit) == (first, "similar#0")
    assert "NUL character" in failure.reason and "pen\ufffdguins" in failure.raw_output
