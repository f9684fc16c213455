"""A background import's rows, its ImportRecord and its job's "done" commit in one transaction
(``import_job_run``). They used to commit apart: a worker killed between the two left 100 items and
their record with the job "running", and the redelivered job then failed with "nothing imported
because the dataset name 'Big' is taken" and no record, the opposite of what happened."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from studies.models import Dataset, ImportJob, ImportRecord, Item
from studies.services.importers import jobs
from studies.services.importers.jobs import import_in_background
from tests.studies.helpers import IMPORT, researcher

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """What a hard-killed worker looks like to the code: nothing after it runs, no handler catches it."""


def items_csv(n: int) -> bytes:
    rows = ["id,question,answer", *(f"q{i},Is item {i} true?,{'yes' if i % 2 else 'no'}" for i in range(n))]
    return ("\n".join(rows) + "\n").encode()


@pytest.fixture
def queued_job(settings, django_capture_on_commit_callbacks):
    """A job queued for 100 items, as the API's upload of a file over RL_IMPORT_BACKGROUND_BYTES
    queues it (``import_job_create``), its task not yet run."""
    settings.RL_IMPORT_BACKGROUND_BYTES = 1000
    upload = SimpleUploadedFile("big-items.csv", items_csv(100))
    assert import_in_background(file=upload)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        job = jobs.import_job_create(kind="items", file=upload, user=researcher("dana", IMPORT),
                                     options={"dataset_name": "Big", "task_format": "yes_no"})
    assert len(queued) == 1 and job.status == ImportJob.Status.QUEUED
    return job.pk


def crash_once_on_done(monkeypatch, exc: BaseException) -> None:
    real = jobs._finish
    crashed = []

    def finish(job, *, status, **kwargs):
        if status == ImportJob.Status.DONE and not crashed:
            crashed.append(status)
            raise exc
        return real(job, status=status, **kwargs)
    monkeypatch.setattr(jobs, "_finish", finish)


def test_a_worker_killed_before_the_job_is_done_leaves_nothing_and_the_redelivery_imports(
        queued_job, monkeypatch):
    crash_once_on_done(monkeypatch, WorkerKilled())
    with pytest.raises(WorkerKilled):
        jobs.import_job_run(job_id=queued_job)
    # nothing of the import was kept: the job is still "running", as a killed worker leaves it
    assert (Item.objects.count(), ImportRecord.objects.count(), Dataset.objects.count()) == (0, 0, 0)
    assert ImportJob.objects.get(pk=queued_job).status == ImportJob.Status.RUNNING

    job = jobs.import_job_run(job_id=queued_job)  # Celery redelivers the message
    assert (job.status, job.error) == (ImportJob.Status.DONE, "")
    assert job.record == ImportRecord.objects.get() and job.record.created == 100
    assert Item.objects.filter(dataset__name="Big").count() == 100
    assert not ImportJob.objects.get(pk=queued_job).file

    again = jobs.import_job_run(job_id=queued_job)  # a job already done: a further redelivery does nothing
    assert (again.status, again.record_id, again.finished_at) == (job.status, job.record_id, job.finished_at)
    assert ImportRecord.objects.count() == 1 and Item.objects.count() == 100


def test_an_error_while_finishing_fails_the_job_with_nothing_imported(queued_job, monkeypatch):
    crash_once_on_done(monkeypatch, RuntimeError("disk full"))
    with pytest.raises(RuntimeError):
        jobs.import_job_run(job_id=queued_job)
    job = ImportJob.objects.get(pk=queued_job)
    assert job.status == ImportJob.Status.FAILED and job.record is None
    assert job.error == "the import failed: RuntimeError: disk full"
    assert (Item.objects.count(), ImportRecord.objects.count(), Dataset.objects.count()) == (0, 0, 0)
    assert jobs.import_job_run(job_id=queued_job).status == ImportJob.Status.FAILED  # a redelivery changes nothing
