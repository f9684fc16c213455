"""A generated text holding a T5 sentinel token (``<extra_id_0>``, ``< extra_id_0 >``, ``<EXTRA_ID_0>``:
``templates.T5_SENTINEL_TEXT``) is not stored, as no import, form or bundle stores one
(``studies.textrules.sentinel_problem``, asked through ``content.content_row_value_problems``): a
rationale or a question holding one is kept as a GenerationFailure of its item and unit naming
why (``common.unstorable_outputs_failed``), the rest of the batch is stored, and a resume sends
nothing again. ``parse_generalization`` takes every sentinel form out of a generated question, as
it takes out the T5 infilling output's own sentinels. A job's batch size is bounded above by the
service (``common.MAX_BATCH_SIZE``), not only by the API and the admin form."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from studies.lm.parsing import ParsedQuestion, parse_generalization
from studies.lm.templates import T5_SENTINEL_TEXT
from studies.models import (
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    QuestionGenerator,
    Rationale,
)
from studies.services.content import content_row_value_problems
from studies.services.generation import GenerationError, generation_job_create, generation_job_run_batch
from studies.services.generation.common import MAX_BATCH_SIZE, BatchOutput, unstorable_outputs_failed

from .openai_server import OpenAIServer, completion
from .test_openai_key_job_caps import QUESTION_DEMOS
from .test_unstorable_outputs import run_job_with_one_bad_output

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("sentinel", ["<extra_id_2>", "< extra_id_0 >", "<EXTRA_ID_0>"])
def test_a_generated_rationale_holding_a_sentinel_fails_its_item_and_the_rest_is_stored(sentinel):
    job, items, sent, again = run_job_with_one_bad_output(sentinel)

    assert job.status == GenerationJob.Status.DONE, job.error
    stored = list(Rationale.objects.filter(source=job.source))
    assert len(stored) == 4
    assert not Rationale.objects.filter(source=job.source, item=items[2]).exists()
    # What the job stored, an import, a form and a bundle would store too.
    assert all(content_row_value_problems(obj=r) == {} for r in stored)
    failure = GenerationFailure.objects.get(job=job)
    assert failure.item_id == items[2].pk
    assert failure.reason.startswith("not stored: the rationale's text")
    assert f"the rationale holds {sentinel!r}, a T5 sentinel token" in failure.reason
    assert f"fa{sentinel}cts" in failure.raw_output  # the model's output, as it was
    assert (job.done, job.failed) == (5, 1)
    assert sent == again == 5  # each item sent once: nothing is sent again


def test_a_generated_question_holding_a_sentinel_fails_its_unit(dev_items, train_items, strategyqa_dataset):
    """``unstorable_outputs_failed`` refuses a question holding a sentinel the way it refuses a
    rationale (a parser that let one through would not store it)."""
    generator = QuestionGenerator.objects.create(
        name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url="http://127.0.0.1:9/v1",
        demonstrations=QUESTION_DEMOS)
    job = generation_job_create(kind="generalization_questions", generator=generator, dataset=strategyqa_dataset,
                                split="dev", limit=1, enqueue=False)
    [item] = [i for i in dev_items if i.pk in job.item_ids]
    good = GeneralizationQuestion(item=item, qtype="similar", text="Can whales fly?", answer="no",
                                  origin=generator.origin, metadata={"sample_index": 0})
    bad = GeneralizationQuestion(item=item, qtype="similar", text="Can < Extra_Id_3 > fly?", answer="no",
                                 origin=generator.origin, metadata={"sample_index": 1})
    output = BatchOutput(units=1, questions=[good, bad])

    unstorable_outputs_failed(job, output)

    assert output.questions == [good]
    [failure] = output.failures
    assert (failure.item_id, failure.unit) == (item.pk, "similar#1")
    assert failure.reason.startswith("not stored: the generalization question's text")
    assert "the question holds '< Extra_Id_3 >', a T5 sentinel token" in failure.reason
    assert failure.raw_output == "Can < Extra_Id_3 > fly?"


def test_a_question_job_stores_no_sentinel(dev_items, train_items, strategyqa_dataset):
    """A generated question loses every sentinel form (the T5 infilling output's own, and one
    written with spaces or capitals), so what a question job stores an import would store too."""
    replies = iter(["<EXTRA_ID_0> Can whales fly?\nanswer: False", "Can < extra_id_1 > penguins fly?\nanswer: False"]
                   + [f"<extra_id_0> Can fish {n} fly? <extra_id_1> answer: False <extra_id_2>" for n in range(4)])
    with OpenAIServer(lambda path, body: (200, completion([next(replies)]), {})) as server:
        generator = QuestionGenerator.objects.create(
            name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"backoff_s": 0.001, "concurrency": 1}, demonstrations=QUESTION_DEMOS)
        job = generation_job_create(kind="generalization_questions", generator=generator, dataset=strategyqa_dataset,
                                    split="dev", limit=2, enqueue=False)
        while generation_job_run_batch(job_id=job.pk):
            pass
    job.refresh_from_db()

    assert job.status == GenerationJob.Status.DONE, job.error
    stored = list(GeneralizationQuestion.objects.filter(origin=generator.origin, item_id__in=job.item_ids))
    assert sorted(q.text for q in stored) == sorted(
        ["Can whales fly?", "Can penguins fly?"] + [f"Can fish {n} fly?" for n in range(4)])
    assert all(content_row_value_problems(obj=q) == {} for q in stored)
    assert not GenerationFailure.objects.filter(job=job).exists()


@pytest.mark.parametrize("raw", [
    "<pad> <extra_id_0> Can whales fly?\nanswer: False <extra_id_1></s>",  # T5 infilling output
    "<extra_id_0> Can whales fly? <extra_id_1> answer: False <extra_id_2>",
    "< EXTRA_ID_0 > Can whales fly?\nanswer: False",
    "Can whales <Extra_id_7> fly?\nanswer: False",
])
def test_parse_generalization_takes_out_every_sentinel_form(raw):
    parsed = parse_generalization(raw)

    assert parsed == ParsedQuestion(text="Can whales fly?", answer="no")
    assert not T5_SENTINEL_TEXT.search(parsed.text)


def test_the_service_bounds_a_job_batch_size(dev_items, train_items, strategyqa_dataset):
    root = get_user_model().objects.create_superuser("root", password="pw")
    generator = QuestionGenerator.objects.create(
        name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url="http://127.0.0.1:9/v1",
        demonstrations=QUESTION_DEMOS)

    def create(batch_size: int) -> GenerationJob:
        return generation_job_create(kind="generalization_questions", generator=generator, dataset=strategyqa_dataset,
                                     split="dev", limit=1, enqueue=False, user=root, batch_size=batch_size)

    for too_big in (MAX_BATCH_SIZE + 1, 10**9):
        with pytest.raises(GenerationError, match=f"batch size must be at most {MAX_BATCH_SIZE}"):
            create(too_big)
    with pytest.raises(GenerationError, match="batch size must be at least 1"):
        create(0)
    assert not GenerationJob.objects.exists()
    assert create(MAX_BATCH_SIZE).batch_size == MAX_BATCH_SIZE == 1024
