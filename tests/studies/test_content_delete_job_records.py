"""A dataset or rationale source an LM job used is not deleted (``content_rows_delete``, the one
owner of content deletion, and the admin's pages and actions through it): its jobs
(``GenerationJob.dataset`` / ``.source`` cascade), their failures and dropped questions would go
with it, a queued or running job of another researcher's included. Any job, any status, anyone's:
the rule of a question generator that ran a job. A dataset or source no job used is still deleted."""
from __future__ import annotations

import pytest
from django.urls import reverse

from studies.models import Dataset, GenerationJob, RationaleSource
from studies.services.content import ContentChangeRefused, content_rows_delete
from studies.services.generation import generation_job_cancel, generation_job_create
from tests.factories import DatasetFactory, ItemFactory, staff

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
