"""A dataset or rationale source an LM job used is not deleted (``content_rows_delete``, the one
owner of content deletion, and the admin's pages and actions through it): its jobs
(``GenerationJob.dataset`` / ``.source`` cascade), their failures and dropped questions would go
with it, a queued or running job of another researcher's included. Any job, any status, anyone's:
the rule of a question generator that ran a job. A dataset or source no job used is still deleted."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    Item,
    Rationale,
    RationaleSource,
)
from studies.services.content import ContentChangeRefused, content_rows_delete
from studies.services.generation import generation_job_cancel, generation_job_create, generation_job_run
from studies.services.questions import generalization_questions_set_validation
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    """A dataset and a source no study uses, which Alice and Bob (every model permission) may both
    delete; Bob's rationales job on them waits in the queue."""
    dataset = DatasetFactory(name="unused-ds")
    for _ in range(3):
        ItemFactory(dataset=dataset, split="dev")
    source = RationaleSource.objects.create(name="t5-local", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    alice, alice_client = staff("alice")
    bob, _ = staff("bob")
    job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=bob,
                                enqueue=False)
    assert job.status == "queued"
    return dataset, source, job, (alice, alice_client), bob


def test_the_service_deletes_no_dataset_or_source_another_researchers_queued_job_runs_on(world):
    dataset, source, job, (alice, _), _ = world
    with pytest.raises(ContentChangeRefused) as refused:
        content_rows_delete(user=alice, model=Dataset, pks=[dataset.pk])
    assert str(refused.value) == (
        f"dataset {dataset.pk} cannot be deleted: LM job {job.pk} ran on it, and deleting it would delete those "
        "records (a queued or running job too, with its failures and dropped questions): a dataset or source an LM "
        "job used stays, as a question generator that ran a job does")
    with pytest.raises(ContentChangeRefused, match=f"rationale source {source.pk} cannot be deleted: LM job "
                                                   f"{job.pk} ran on it"):
        content_rows_delete(user=alice, model=RationaleSource, pks=[source.pk])
    assert Dataset.objects.filter(pk=dataset.pk).exists() and RationaleSource.objects.filter(pk=source.pk).exists()
    assert GenerationJob.objects.filter(pk=job.pk, status="queued").exists()


def test_the_admins_delete_action_names_the_dataset_and_the_job(world):
    dataset, source, job, (_, alice_client), _ = world
    for model, row in (("dataset", dataset), ("rationalesource", source)):
        changelist = reverse(f"admin:studies_{model}_changelist")
        page = alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [row.pk]})
        assert f"cannot be deleted: LM job {job.pk} ran on it" in page.content.decode()
        alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"})
        assert alice_client.post(reverse(f"admin:studies_{model}_delete", args=[row.pk]),
                                 {"post": "yes"}).status_code == 403
    assert Dataset.objects.filter(pk=dataset.pk).exists() and RationaleSource.objects.filter(pk=source.pk).exists()
    assert GenerationJob.objects.filter(pk=job.pk).exists()


def test_ones_own_dataset_stays_once_ones_own_job_ended_and_an_unused_one_goes(world):
    _, _, _, (alice, _), _ = world
    mine = DatasetFactory(name="alices-ds")
    ItemFactory(dataset=mine, split="dev")
    source = RationaleSource.objects.create(name="alices-t5", kind="lm", backend="seq2seq",
                                            model_name_or_path="/m/t5")
    job = generation_job_create(kind="rationales", source=source, dataset=mine, split="dev", user=alice,
                                enqueue=False)
    generation_job_cancel(job=job, user=alice)
    with pytest.raises(ContentChangeRefused, match=f"dataset {mine.pk} cannot be deleted: LM job {job.pk}"):
        content_rows_delete(user=alice, model=Dataset, pks=[mine.pk])
    assert GenerationJob.objects.filter(pk=job.pk, status="cancelled").exists()

    unused = DatasetFactory(name="never-run")
    ItemFactory(dataset=unused, split="dev")
    assert content_rows_delete(user=alice, model=Dataset, pks=[unused.pk]) == 2  # the dataset and its item
    assert not Dataset.objects.filter(pk=unused.pk).exists()


# Issue: the rule covered only datasets and sources, but an item's job failures and dropped
# questions (``GenerationFailure.item`` / ``DroppedQuestion.item``), a generalization question's
# Gen-U predictions (``GenUPrediction.generalization_question``) cascade too: deleting an item of
# a dataset another researcher's queued job runs on left that job on an emptied dataset, with its
# failures gone; deleting a question took its predictions.

def test_an_item_of_a_dataset_another_researchers_queued_job_runs_on_stays(world):
    dataset, _, job, (alice, alice_client), _ = world
    items = list(Item.objects.filter(dataset=dataset).order_by("pk"))
    with pytest.raises(ContentChangeRefused) as refused:
        content_rows_delete(user=alice, model=Item, pks=[i.pk for i in items])
    assert refused.value.problems[items[0].pk] == (
        f"item {items[0].pk} cannot be deleted: LM job {job.pk} ran on its dataset, and deleting it would delete "
        "those records or leave them without it (a queued or running job's too): an item, generalization question "
        "or rationale an LM job used stays, as its dataset and source do")
    assert set(refused.value.problems) == {i.pk for i in items}
    changelist = reverse("admin:studies_item_changelist")  # the admin's Items "Delete selected"
    page = alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [items[0].pk]})
    assert f"item {items[0].pk} cannot be deleted: LM job {job.pk} ran on its dataset" in page.content.decode()
    alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [items[0].pk], "post": "yes"})
    assert Item.objects.filter(dataset=dataset).count() == 3
    assert GenerationJob.objects.filter(pk=job.pk, status="queued", total=3).exists()


@pytest.fixture
def answered():
    """Bob's Gen-U job, run, on two dev items of a yes/no dataset, each with a rationale of the
    imported source ``explainer`` and one validated rephrase; the answerers' outputs do not parse,
    so it records a failure per question and answerer beside its predictions."""
    from tests.studies.lm.openai_server import OpenAIServer, completion

    dataset = DatasetFactory(name="genu-ds")
    source = RationaleSource.objects.create(name="explainer", kind=RationaleSource.Kind.IMPORTED)
    items = [ItemFactory(dataset=dataset, split="dev", gold_answer="yes") for _ in range(2)]
    rationales, questions = [], []
    for item in items:
        rationales.append(RationaleFactory(item=item, source=source))
        questions.append(GeneralizationQuestion.objects.create(item=item, qtype="rephrase", answer="yes",
                                                               text=f"Rephrased: {item.question}"))
    generalization_questions_set_validation(questions=questions, status="valid")
    alice, alice_client = staff("alice")
    bob, _ = staff("bob")
    with OpenAIServer(lambda path, body: (200, completion([" banana"]), {})) as server:
        answerers = {role: RationaleSource.objects.create(
            name=f"ckpt-{role}", kind="lm", backend="openai", model_name_or_path="shared/ckpt",
            endpoint_url=server.url, decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")}
        job = generation_job_run(job_id=generation_job_create(
            kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=bob, enqueue=False,
            params={"answerer_i": answerers["I"].pk, "answerer_ir": answerers["IR"].pk}).pk)
    assert job.status == "done", job.error
    assert GenUPrediction.objects.filter(rationale_source=source).count() == 4
    assert GenerationFailure.objects.filter(job=job).count() == 4
    return job, items, rationales, questions, (alice, alice_client)


def test_an_item_a_gen_u_job_answered_stays_with_its_failures_and_predictions(answered):
    job, items, _, _, (alice, _) = answered
    with pytest.raises(ContentChangeRefused) as refused:
        content_rows_delete(user=alice, model=Item, pks=[items[0].pk])
    assert str(refused.value) == (
        f"item {items[0].pk} cannot be deleted: LM job {job.pk} ran on its dataset and 2 failures of LM jobs are "
        "recorded for it and 2 Gen-U predictions were made on its generalization questions, and deleting it would "
        "delete those records or leave them without it (a queued or running job's too): an item, generalization "
        "question or rationale an LM job used stays, as its dataset and source do")
    assert GenerationFailure.objects.filter(job=job).count() == 4 and GenUPrediction.objects.count() == 4


def test_a_generalization_question_with_gen_u_predictions_stays(answered):
    job, _, _, questions, (alice, alice_client) = answered
    with pytest.raises(ContentChangeRefused) as refused:
        content_rows_delete(user=alice, model=GeneralizationQuestion, pks=[questions[0].pk])
    assert str(refused.value) == (
        f"generalization question {questions[0].pk} cannot be deleted: LM job {job.pk}, which writes or answers "
        "generalization questions, ran on its item's dataset and 2 Gen-U predictions were made on it, and deleting "
        "it would delete those records or leave them without it (a queued or running job's too): an item, "
        "generalization question or rationale an LM job used stays, as its dataset and source do")
    changelist = reverse("admin:studies_generalizationquestion_changelist")
    alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [questions[1].pk], "post": "yes"})
    assert GeneralizationQuestion.objects.filter(pk__in=[q.pk for q in questions]).count() == 2
    assert GenUPrediction.objects.count() == 4


def test_a_rationale_a_job_read_and_gen_u_predictions_were_made_from_stays(answered):
    job, _, rationales, _, (alice, _) = answered
    with pytest.raises(ContentChangeRefused) as refused:
        content_rows_delete(user=alice, model=Rationale, pks=[r.pk for r in rationales])
    assert refused.value.problems[rationales[0].pk] == (
        f"rationale {rationales[0].pk} cannot be deleted: LM job {job.pk} ran on its source and 1 Gen-U prediction "
        "was made from it (F^IR), and deleting it would delete those records or leave them without it (a queued "
        "or running job's too): an item, generalization question or rationale an LM job used stays, as its "
        "dataset and source do")
    assert set(refused.value.problems) == {r.pk for r in rationales}
    assert Rationale.objects.filter(pk__in=[r.pk for r in rationales]).count() == 2


def test_a_dataset_whose_questions_gen_u_predictions_were_made_on_names_them(answered):
    job, items, _, _, (alice, _) = answered
    dataset = items[0].dataset
    with pytest.raises(ContentChangeRefused, match=f"dataset {dataset.pk} cannot be deleted: LM job {job.pk} ran on "
                                                   "it and 4 Gen-U predictions were made on its generalization "
                                                   "questions, and deleting it"):
        content_rows_delete(user=alice, model=Dataset, pks=[dataset.pk])


def test_items_questions_and_rationales_no_job_used_are_still_deleted(world):
    """A question of an item whose dataset only a rationales job ran on (no job wrote or answered
    questions, no prediction was made on it), a rationale of a source no job ran on, an item of a
    dataset no job ran on: nothing an LM job used or recorded goes with them."""
    dataset, _, _, (alice, _), _ = world
    item = Item.objects.filter(dataset=dataset).first()
    question = GeneralizationQuestion.objects.create(item=item, qtype="rephrase", answer="yes", text="Rephrased?")
    assert content_rows_delete(user=alice, model=GeneralizationQuestion, pks=[question.pk]) == 1
    imported = RationaleSource.objects.create(name="humans", kind=RationaleSource.Kind.IMPORTED)
    rationale = RationaleFactory(item=item, source=imported)
    assert content_rows_delete(user=alice, model=Rationale, pks=[rationale.pk]) == 1
    unused = ItemFactory(dataset=DatasetFactory(name="never-run"), split="dev")
    assert content_rows_delete(user=alice, model=Item, pks=[unused.pk]) == 1


# Issue: a source a job's params name as a Gen-U answerer (``answerer_i`` / ``answerer_ir``:
# Gen-U answers jobs, Quark jobs with the Gen-U reward) was deleted: the rule looked only at the
# job's own source and at the source whose rationales predictions were made from. The other
# researcher's done job lost which source answered its predictions (``answerer_source`` set null)
# and their queued job stopped for want of its answerer.

SOURCE_TAIL = ("and deleting it would delete those records or leave them without it (a queued or running job too, "
               "with its failures and dropped questions): a dataset or source an LM job used stays, as a question "
               "generator that ran a job does")


def test_a_source_another_researchers_gen_u_jobs_answer_with_stays(answered):
    job, items, _, _, (alice, alice_client) = answered
    bob = job.created_by
    answerer = RationaleSource.objects.get(name="ckpt-I")
    queued = generation_job_create(
        kind="genu_answers", source=job.source, item_ids=[i.pk for i in items], user=bob, enqueue=False,
        params={"answerer_i": answerer.pk, "answerer_ir": RationaleSource.objects.get(name="ckpt-IR").pk})
    with pytest.raises(ContentChangeRefused) as refused:
        content_rows_delete(user=alice, model=RationaleSource, pks=[answerer.pk])
    assert str(refused.value) == (
        f"rationale source {answerer.pk} cannot be deleted: LM jobs {job.pk}, {queued.pk} used it as a Gen-U "
        f"answerer and 2 Gen-U predictions were made by it as the answerer, {SOURCE_TAIL}")

    # The admin's change-page delete and its "Delete selected" go through the same service.
    assert alice_client.post(reverse("admin:studies_rationalesource_delete", args=[answerer.pk]),
                             {"post": "yes"}).status_code == 403
    changelist = reverse("admin:studies_rationalesource_changelist")
    page = alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [answerer.pk]})
    assert f"rationale source {answerer.pk} cannot be deleted: LM jobs {job.pk}, {queued.pk} used it" in (
        page.content.decode())
    alice_client.post(changelist, {"action": "delete_selected", "_selected_action": [answerer.pk], "post": "yes"})
    assert RationaleSource.objects.filter(pk=answerer.pk).exists()
    assert GenUPrediction.objects.filter(answerer_source=answerer).count() == 2
    assert GenerationJob.objects.filter(pk=queued.pk, status="queued").exists()


def test_a_source_only_a_queued_job_names_as_answerer_stays_and_an_unnamed_one_goes(answered):
    """Bob's source, which Alice's queued Gen-U job names as its answerers: no prediction was made
    by it yet and no job ran on it, so the job's params alone keep it, as a job's own source keeps
    it."""
    job, items, _, _, (alice, _) = answered
    bob, bob_client = job.created_by, Client()
    bob_client.force_login(bob)
    bobs = RationaleSource.objects.create(name="bobs-answerer", kind="lm", backend="openai",
                                          model_name_or_path="shared/ckpt", endpoint_url="http://127.0.0.1:9/v1")
    # On a source of its own: the job's source already has Bob's answerers' predictions, and a Gen-U
    # job with other answerers than those is refused.
    other = RationaleSource.objects.create(name="explainer-2", kind=RationaleSource.Kind.IMPORTED)
    for item in items:
        RationaleFactory(item=item, source=other)
    queued = generation_job_create(kind="genu_answers", source=other, item_ids=[i.pk for i in items],
                                   user=alice, enqueue=False, params={"answerer_i": bobs.pk, "answerer_ir": bobs.pk})
    assert bob_client.post(reverse("admin:studies_rationalesource_delete", args=[bobs.pk]),
                           {"post": "yes"}).status_code == 403
    changelist = reverse("admin:studies_rationalesource_changelist")
    page = bob_client.post(changelist, {"action": "delete_selected", "_selected_action": [bobs.pk]})
    assert (f"rationale source {bobs.pk} cannot be deleted: LM job {queued.pk} used it as a Gen-U answerer, "
            f"{SOURCE_TAIL}") in page.content.decode()
    bob_client.post(changelist, {"action": "delete_selected", "_selected_action": [bobs.pk], "post": "yes"})
    assert RationaleSource.objects.filter(pk=bobs.pk).exists()
    assert GenerationJob.objects.filter(pk=queued.pk, status="queued").exists()

    unnamed = RationaleSource.objects.create(name="never-answered", kind="lm", backend="openai",
                                             model_name_or_path="shared/ckpt", endpoint_url="http://127.0.0.1:9/v1")
    assert content_rows_delete(user=bob, model=RationaleSource, pks=[unnamed.pk]) == 1


def test_a_source_a_queued_quark_job_rewards_with_as_gen_u_answerer_stays(world):
    """Alice's queued Quark job rewarded by Gen-U names Bob's source as both answerers."""
    _, _, _, (alice, _), bob = world
    dataset = DatasetFactory(name="quark-ds")
    questions = []
    for split in ("train", "dev", "test"):
        for _ in range(2):
            item = ItemFactory(dataset=dataset, split=split, gold_answer="yes")
            questions.append(GeneralizationQuestion.objects.create(item=item, qtype="rephrase", answer="yes",
                                                                   text=f"Rephrased: {item.question}"))
    generalization_questions_set_validation(questions=questions, status="valid")
    bobs = RationaleSource.objects.create(name="bobs-answerer", kind="lm", backend="openai",
                                          model_name_or_path="shared/ckpt", endpoint_url="http://127.0.0.1:9/v1")
    policy = RationaleSource.objects.create(name="policy", kind="lm", backend="seq2seq",
                                            model_name_or_path="/models/tiny-t5")
    quark = generation_job_create(kind="quark", source=policy, dataset=dataset, split="train", user=alice,
                                  enqueue=False, params={"reward": "genu", "answerer_i": bobs.pk,
                                                         "answerer_ir": bobs.pk, "settings": {"steps": 2}})
    with pytest.raises(ContentChangeRefused, match=f"rationale source {bobs.pk} cannot be deleted: LM job "
                                                   f"{quark.pk} used it as a Gen-U answerer, and deleting it"):
        content_rows_delete(user=bob, model=RationaleSource, pks=[bobs.pk])
    assert GenerationJob.objects.filter(pk=quark.pk, status="queued").exists()
