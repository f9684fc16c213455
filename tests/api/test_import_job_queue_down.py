"""A background import whose task cannot be queued (the broker is down) fails at once.

``import_job_create`` commits the job's row and its upload, then sends its task. When the broker
cannot be reached the job used to stay ``queued`` forever with its upload kept (no beat task
recovers an import job) and the caller got a 500. Now the job is failed with the reason, its
upload deleted, and the caller told: ``ImportQueueUnavailable``, which the API answers 503."""
from __future__ import annotations

import pytest
from celery import Celery, current_app
from django.core.files.uploadedfile import SimpleUploadedFile

from studies.models import ImportJob, Item
from studies.services.importers.jobs import QUEUE_DOWN, ImportQueueUnavailable, import_job_create

# The row and the upload are committed before the task is sent (``transaction.on_commit``).
pytestmark = pytest.mark.django_db(transaction=True)

CSV = b"id,question,answer\n" + b"".join(f"q{i},Is item {i} true?,yes\n".encode() for i in range(100))


@pytest.fixture
def broker_down(settings, tmp_path):
    """Tasks are sent to a Redis broker where nothing listens: the current Celery app is one
    configured as the project's (``config.celery``) but for its broker, so no connection pool an
    earlier test opened to the tests' broker is reused. Uploads are stored under ``tmp_path``,
    whose files the test can list."""
    settings.MEDIA_ROOT = tmp_path
    settings.RL_IMPORT_BACKGROUND_BYTES = 1000
    down = Celery("rationale_lab", set_as_current=False)
    down.config_from_object("django.conf:settings", namespace="CELERY")
    down.conf.update(broker_url="redis://127.0.0.1:1/0", task_always_eager=False)
    previous = current_app._get_current_object()
    down.set_current()
    try:
        yield tmp_path
    finally:
        previous.set_current()
        down.close()


def stored_files(root) -> list:
    return [p for p in root.rglob("*") if p.is_file()]


def test_the_service_fails_the_job_deletes_the_upload_and_says_so(researcher, broker_down):
    upload = SimpleUploadedFile("items.csv", CSV)
    with pytest.raises(ImportQueueUnavailable, match="the task queue could not be reached"):
        import_job_create(kind="items", file=upload, user=researcher,
                          options={"dataset_name": "D", "task_format": "yes_no"})

    job = ImportJob.objects.get()
    assert job.status == ImportJob.Status.FAILED and job.stage == ImportJob.Stage.FINISHED
    assert job.error == QUEUE_DOWN and job.finished_at is not None
    assert not job.file and stored_files(broker_down) == []
    assert not Item.objects.exists()


def test_the_api_answers_503_with_the_reason(client_for, researcher, broker_down):
    client = client_for(researcher)
    upload = SimpleUploadedFile("big-items.csv", CSV)

    response = client.post("/api/v1/imports/", {"kind": "items", "file": upload, "dataset": "Big",
                                                "task_format": "yes_no"}, format="multipart")

    assert response.status_code == 503, response.content
    assert QUEUE_DOWN in response.json()["detail"]
    job = ImportJob.objects.get()
    assert job.status == ImportJob.Status.FAILED and job.error == QUEUE_DOWN
    assert not job.file and stored_files(broker_down) == []
