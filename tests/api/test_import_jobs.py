"""Large imports run as background jobs with progress (issue 20 item 12): a 53 MB CSV posted to
``POST /api/v1/imports/`` was parsed inside the web request until gunicorn killed it. A file over
``RL_IMPORT_BACKGROUND_BYTES`` is stored and imported by a Celery task; the answer is 202 with the
job, which shows its progress and ends with its import record or every bad row. Still all or
nothing, still capped by ``RL_IMPORT_MAX_ROWS``."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from studies.models import Dataset, ImportJob, ImportRecord, Item
from studies.services.importers.jobs import MAX_ATTEMPTS, import_job_run
from studies.services.importers.reading import parse_csv, read_import_file, reporting_progress
from studies.tasks import run_import_job
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db


def items_csv(n: int, *, bad_lines=()) -> bytes:
    rows = ["id,question,answer"]
    for i in range(n):
        answer = "maybe" if i + 2 in bad_lines else ("yes" if i % 2 else "no")
        rows.append(f"q{i},Is item {i} true?,{answer}")
    return ("\n".join(rows) + "\n").encode()


@pytest.fixture
def background(settings):
    settings.RL_IMPORT_BACKGROUND_BYTES = 1000


def post(client, content: bytes, **extra):
    upload = SimpleUploadedFile("big-items.csv", content)
    return client.post("/api/v1/imports/", {"kind": "items", "file": upload, "dataset": "Big",
                                            "task_format": "yes_no", **extra}, format="multipart")


def test_a_large_file_is_imported_by_a_background_job_with_its_progress(
        client_for, researcher, background, django_capture_on_commit_callbacks):
    client = client_for(researcher)
    with django_capture_on_commit_callbacks(execute=True) as queued:
        response = post(client, items_csv(3000))
        # the request itself wrote no item: it stored the file and queued the job
        assert response.status_code == 202, response.content
        assert Item.objects.count() == 0
        job = response.json()
        assert job["status"] == "queued" and job["stage"] == "waiting" and job["size"] > 1000
    assert len(queued) == 1  # run_import_job, after the job's row was committed (eager in tests)

    done = client.get(job["url"]).json()
    assert done["status"] == "done" and done["stage"] == "finished" and done["rows_read"] == 3000
    record = ImportRecord.objects.get(pk=done["record"])
    assert record.created == 3000 and record.imported_by == researcher and record.filename == "big-items.csv"
    assert Item.objects.filter(dataset__name="Big").count() == 3000
    assert not ImportJob.objects.get(pk=job["id"]).file  # the stored upload is gone once imported


def test_a_large_file_with_bad_rows_fails_its_job_with_every_row_and_writes_nothing(
        client_for, researcher, background, django_capture_on_commit_callbacks):
    client = client_for(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        job = post(client, items_csv(2000, bad_lines=(5, 1500))).json()
    failed = client.get(job["url"]).json()
    assert failed["status"] == "failed"
    assert [(e["line"], e["field"]) for e in failed["errors"]] == [(5, "answer"), (1500, "answer")]
    assert "'maybe'" in failed["errors"][0]["reason"]
    assert "nothing imported" in failed["error"]
    assert not Dataset.objects.exists() and not Item.objects.exists() and not ImportRecord.objects.exists()


def test_a_large_file_over_the_row_cap_fails_its_job_with_the_cap(
        client_for, researcher, background, settings, django_capture_on_commit_callbacks):
    settings.RL_IMPORT_MAX_ROWS = 500
    client = client_for(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        job = post(client, items_csv(2000)).json()
    failed = client.get(job["url"]).json()
    assert failed["status"] == "failed" and failed["errors"][0]["line"] == 502
    assert "more than 500 records, the import limit (RL_IMPORT_MAX_ROWS)" in failed["errors"][0]["reason"]
    assert not Item.objects.exists()


def test_a_small_file_is_still_imported_at_once(client_for, researcher):
    response = post(client_for(researcher), items_csv(20))
    assert response.status_code == 201 and response.json()["created"] == 20
    assert not ImportJob.objects.exists()


def test_running_a_job_again_changes_nothing(client_for, researcher, background, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job_id = post(client_for(researcher), items_csv(100)).json()["id"]
    first = ImportJob.objects.get(pk=job_id)
    run_import_job.delay(job_id)  # a redelivered message
    again = ImportJob.objects.get(pk=job_id)
    assert (again.status, again.record_id, again.finished_at) == (first.status, first.record_id, first.finished_at)
    assert ImportRecord.objects.count() == 1 and Item.objects.count() == 100


def test_another_researchers_job_is_not_found(client_for, researcher, other_researcher, background,
                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = post(client_for(researcher), items_csv(100)).json()
    assert client_for(other_researcher).get(job["url"]).status_code == 404
    assert client_for(other_researcher).get("/api/v1/import-jobs/").json()["results"] == []



def test_the_view_permission_opens_no_other_researchers_job_or_import(
        client_for, researcher, other_researcher, background, django_capture_on_commit_callbacks):
    # Olga may read import records (``studies.view_importrecord``): that opens the pages, not Dana's
    # imports. Dana's failed job quotes her file's rows; her done job names her file and dataset.
    from tests.api.conftest import grant

    olga = grant(other_researcher, "studies.view_importrecord")
    with django_capture_on_commit_callbacks(execute=True):
        failed = post(client_for(researcher), items_csv(100, bad_lines=(5,))).json()
        done = post(client_for(researcher), items_csv(100)).json()
    record = ImportRecord.objects.get()
    olgas = client_for(olga)

    assert olgas.get(failed["url"]).status_code == 404 and olgas.get(done["url"]).status_code == 404
    assert olgas.get("/api/v1/import-jobs/").json()["results"] == []
    assert olgas.get(f"/api/v1/imports/{record.pk}/").status_code == 404
    assert olgas.get("/api/v1/imports/").json()["results"] == []
    # Dana still reads both of her jobs and her import.
    assert {j["id"] for j in client_for(researcher).get("/api/v1/import-jobs/").json()["results"]} == {
        failed["id"], done["id"]}


def test_a_study_shared_to_change_on_the_dataset_opens_the_done_job_and_its_import_not_a_failed_one(
        client_for, researcher, other_researcher, background, django_capture_on_commit_callbacks):
    from studies.models import StudyShare
    from studies.services.sharing import study_share
    from studies.services.studies import study_create
    from tests.api.conftest import grant
    from tests.factories import RationaleSourceFactory

    with django_capture_on_commit_callbacks(execute=True):
        failed = post(client_for(researcher), items_csv(100, bad_lines=(5,))).json()
        done = post(client_for(researcher), items_csv(100)).json()
    record = ImportRecord.objects.get()
    split = Item.objects.filter(dataset=record.dataset).values_list("split", flat=True).first()
    study = study_create(name="danas-study", dataset=record.dataset, split=split, sources=[RationaleSourceFactory()],
                         owner=researcher)
    grant(other_researcher, "studies.change_study")
    olgas = client_for(other_researcher)
    study_share(study=study, user=researcher, with_user=other_researcher)  # a view share reads the study only
    assert olgas.get(f"/api/v1/imports/{record.pk}/").status_code == 404
    assert olgas.get("/api/v1/import-jobs/").json()["results"] == []
    study_share(study=study, user=researcher, with_user=other_researcher, level=StudyShare.Level.CHANGE)

    assert [j["id"] for j in olgas.get("/api/v1/import-jobs/").json()["results"]] == [done["id"]]
    assert olgas.get(done["url"]).json()["record"] == record.pk
    assert olgas.get(failed["url"]).status_code == 404  # it wrote nothing; its errors quote Dana's file
    assert olgas.get(f"/api/v1/imports/{record.pk}/").json()["filename"] == "big-items.csv"

def test_a_job_needs_the_import_permission(make_user, client_for, background):
    reader = make_user("reader", perms=["studies.add_study"])
    response = post(client_for(reader), items_csv(100))
    assert response.status_code == 403 and not ImportJob.objects.exists()


def test_progress_is_reported_while_the_rows_are_read(settings, tmp_path):
    path = tmp_path / "items.csv"
    path.write_bytes(items_csv(25_000))
    calls = []
    with reporting_progress(lambda rows, finished: calls.append((rows, finished))):
        parse_csv(read_import_file(path))
    assert calls == [(10_000, False), (20_000, False), (25_000, True)]


def test_the_admin_import_page_sends_a_large_file_to_a_job_and_shows_it(
        researcher, background, django_capture_on_commit_callbacks):
    researcher.is_staff = True
    researcher.save()
    from tests.api.conftest import grant

    grant(researcher, "studies.add_item")
    client = Client()
    client.force_login(researcher)
    upload = SimpleUploadedFile("big-items.csv", items_csv(1500))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:studies_import_data"), {
            "kind": "items", "file": upload, "dataset": "Big", "task_format": "yes_no"})
    job = ImportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("admin:studies_importjob_change",
                                                                            args=[job.pk])
    page = client.get(response["Location"]).content.decode()
    assert "Done" in page and "1500" in page
    assert Item.objects.filter(dataset__name="Big").count() == 1500


def test_a_job_left_running_by_a_killed_worker_runs_again(client_for, researcher, background,
                                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as queued:
        job_id = post(client_for(researcher), items_csv(50)).json()["id"]
    ImportJob.objects.filter(pk=job_id).update(status=ImportJob.Status.RUNNING)  # the worker died mid-import
    assert len(queued) == 1
    job = import_job_run(job_id=job_id)  # the redelivered message
    assert job.status == ImportJob.Status.DONE and Item.objects.count() == 50


def test_a_job_that_kills_its_worker_every_time_fails_after_the_last_attempt(
        client_for, researcher, background, django_capture_on_commit_callbacks, monkeypatch):
    """A file whose import kills its worker (out of memory) is redelivered at once
    (``reject_on_worker_lost``): before, it was started again for ever, killing a worker each time.
    It is started ``MAX_ATTEMPTS`` times, then failed, saying why, and its upload deleted."""
    with django_capture_on_commit_callbacks(execute=False):
        job_id = post(client_for(researcher), items_csv(50)).json()["id"]

    class Killed(BaseException):
        """The worker is killed mid-import: nothing after it runs."""

    def killed(**kwargs):
        raise Killed()

    with monkeypatch.context() as patch:
        patch.setattr("studies.services.importers.jobs.import_run", killed)
        for _ in range(MAX_ATTEMPTS):  # each delivery starts it, and dies
            with pytest.raises(Killed):
                import_job_run(job_id=job_id)
    job = import_job_run(job_id=job_id)  # the next delivery

    assert (job.status, job.attempts) == (ImportJob.Status.FAILED, MAX_ATTEMPTS)
    assert f"the import worker stopped {MAX_ATTEMPTS} times on this file" in job.error
    assert not ImportJob.objects.get(pk=job_id).file and Item.objects.count() == 0


def test_a_job_whose_researcher_was_deleted_adds_nothing_another_researchers_study_shows(
        make_user, researcher, background, django_capture_on_commit_callbacks):
    # Olga's draft study shows source "olgas-lm" for item q0. Dana queues a rationale import that
    # would add that rationale, and her account is deleted before the job runs: the job acts for
    # nobody (not as the operator, whom the "not yours" clause does not bind), so the row is refused.
    from django.core.files.base import ContentFile

    from studies.models import Rationale, RationaleSource, Study
    from studies.services.importers.jobs import import_job_create
    from tests.factories import DatasetFactory, ItemFactory

    olga = make_user("olga", perms=["studies.change_study"])
    dataset = DatasetFactory(name="YN")
    items = [ItemFactory(dataset=dataset, external_id=f"q{i}", gold_answer="yes") for i in range(2)]
    source = RationaleSource.objects.create(name="olgas-lm", kind="imported")
    study = Study.objects.create(name="olgas-study", dataset=dataset, owner=olga)
    study.items.set(items[:1])
    study.sources.set([source])
    rows = "item_id,rationale\n" + "".join(f"q{i},Because {i}.\n" for i in range(2))
    upload = ContentFile(rows.encode(), name="rationales.csv")
    # Dana may read YN and the source when queueing (checked then, as an inline import checks them)
    grant(researcher, "studies.view_dataset", "studies.view_rationalesource")
    with django_capture_on_commit_callbacks(execute=False):  # queued, not run yet
        job = import_job_create(kind="rationales", file=upload, user=researcher,
                                options={"dataset_name": "YN", "source_name": "olgas-lm"})
    researcher.delete()

    job = import_job_run(job_id=job.pk)
    assert job.status == "failed", job.error
    # Nobody may see a dataset (``datasets_for_user``): the file is refused as one naming an unknown
    # dataset, before any of its rows could reach the study.
    assert "unknown dataset 'YN'" in job.error and "(known: none you may see)" in job.error
    assert not Rationale.objects.filter(source=source).exists()
