"""A JSON ``NaN`` (or ``Infinity``, or ``1e400``) in an imported row: ``POST /api/v1/imports/``
answered 500 (SQLite's ``JSON_VALID`` check, PostgreSQL's invalid ``jsonb``), and a background job
ended with ``error='the import failed: DataError: ...'`` and no row named. Both now answer the row
error with its line, field and reason, and nothing is written."""
from __future__ import annotations

import pytest
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile

from studies.models import Dataset, ImportJob, ImportRecord, Item, Rationale
from studies.services.importers import import_run
from studies.services.importers.jobs import import_job_create, import_job_run
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db

ROWS = ('{"id":"x0","question":"Is it?","answer":"no"}\n'
        '{"id":"x1","question":"Q?","answer":"yes","extra":NaN}\n')


def test_the_api_answers_a_nan_in_a_row_with_its_line_and_field(client_for, researcher):
    upload = SimpleUploadedFile("items.jsonl", ROWS.encode())
    response = client_for(researcher).post("/api/v1/imports/", {
        "kind": "items", "file": upload, "dataset": "NaNs", "task_format": "yes_no"}, format="multipart")
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    assert (error["line"], error["field"]) == (2, "extra")
    assert error["reason"].startswith("the number is NaN (not a number), which JSON cannot hold")
    assert not Dataset.objects.exists() and not Item.objects.exists() and not ImportRecord.objects.exists()


def test_a_background_rationale_import_fails_with_the_row_not_a_database_error(
        researcher, django_capture_on_commit_callbacks):
    # Dana reads every dataset and item (no study of hers shows them): her rationales may name them.
    researcher = grant(researcher, "studies.view_dataset", "studies.view_item")
    items = ContentFile(b"id,question,answer\nq1,Is ice cold?,yes\n", name="items.csv")
    import_run(kind="items", file=items, dataset_name="YN", task_format="yes_no", user=researcher)
    rows = ('{"item_id":"q1","source":"s","rationale":"Because."}\n'
            '{"item_id":"q1","source":"t","rationale":"Since.","logprob":-Infinity}\n')
    with django_capture_on_commit_callbacks(execute=False):  # queued, run below as the worker would
        job = import_job_create(kind="rationales", file=ContentFile(rows.encode(), name="rationales.jsonl"),
                                user=researcher, options={"dataset_name": "YN"})

    job = import_job_run(job_id=job.pk)
    assert job.status == ImportJob.Status.FAILED, job.error
    assert "DataError" not in job.error and "IntegrityError" not in job.error and "nothing imported" in job.error
    [error] = job.errors
    assert (error["line"], error["field"]) == (2, "logprob")
    assert error["reason"].startswith("the number is -Infinity")
    assert not Rationale.objects.exists() and ImportRecord.objects.count() == 1  # the items' only
