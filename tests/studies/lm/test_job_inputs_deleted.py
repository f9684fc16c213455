"""An LM job whose item, or whose source's rationale of an item, is deleted while it runs ends
(done, the item failed with why where it still exists), instead of handing that item out to every
batch, each queueing the next, for ever: no kind counted it as processed, and nothing was made
for it. Found by an audit; the deletions are those a dataset's or source's owner makes."""
from __future__ import annotations

import pytest

from studies.models import GenerationFailure, GenerationJob, Item, Rationale, RationaleSource
from studies.services.generation import generation_job_create, generation_job_run_batch
from studies.services.generation.common import RATIONALE_GONE
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.lm.openai_server import OpenAIServer, completion
from tests.studies.lm.test_genu_answerer_source import explained_items_with_valid_questions
from tests.studies.lm.test_job_rights import _hosted_source, _train_pool

pytestmark = pytest.mark.django_db


def _run(job: GenerationJob, most: int = 6) -> list[bool]:
    """Run the job's batches as the worker does (each says whether more remains), at most ``most``."""
    more = []
    while len(more) < most and (not more or more[-1]):
        more.append(generation_job_run_batch(job_id=job.pk))
    return more


def test_a_rationale_job_whose_item_is_deleted_ends_done_with_the_others():
    dataset = DatasetFactory(name="d")
    items = [ItemFactory(dataset=dataset, split="dev") for _ in range(3)]
    _train_pool(dataset)
    with OpenAIServer(lambda path, body: (200, completion([" yes\nReason: because.\n###"]), {})) as server:
        source = _hosted_source(server)
        job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev",
                                    batch_size=3, user=None, enqueue=False)
        Item.objects.filter(pk=items[1].pk).delete()
        more = _run(job)
    job.refresh_from_db()
    assert more[-1] is False and len(more) <= 2
    assert (job.status, job.done, job.total) == (GenerationJob.Status.DONE, 3, 3)
    assert set(Rationale.objects.filter(source=source).values_list("item_id", flat=True)) == {items[0].pk, items[2].pk}
    assert len(server.requests) == 2


def test_a_gen_u_job_whose_rationale_is_deleted_fails_that_item_saying_why_and_ends():
    source, items = explained_items_with_valid_questions(n=2)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = {role: RationaleSource.objects.create(
            name=f"a-{role}", kind="lm", backend="openai", model_name_or_path="m", endpoint_url=server.url,
            decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")}
        job = generation_job_create(kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None,
                                    enqueue=False, params={"answerer_i": answerers["I"].pk,
                                                           "answerer_ir": answerers["IR"].pk})
        Rationale.objects.filter(source=source, item=items[0]).delete()
        more = _run(job)
    job.refresh_from_db()
    assert more[-1] is False
    assert job.status == GenerationJob.Status.DONE and job.done == job.total and job.failed == 1
    failure = GenerationFailure.objects.get(job=job)
    assert failure.item_id == items[0].pk and failure.reason == RATIONALE_GONE.format(what="answer")
