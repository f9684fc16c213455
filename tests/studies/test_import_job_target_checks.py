"""A large import (a file over ``RL_IMPORT_BACKGROUND_BYTES``) is refused, before its upload is stored,
for what its target is, as the same import of a small file is: ``import_job_create`` asks the checks
the importer itself makes first (its dataset, its source name, its split, its status), the same
functions (``studies.services.importers.jobs.TARGET_CHECKS``). Before, a large file naming another
researcher's source (or dataset) was stored and queued (202) and its job failed later, where the same
file small was a 400 naming the field."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import ImportJob, ImportRecord, Rationale, RationaleSource
from studies.services.importers import ImportValidationError, import_run
from studies.services.importers.jobs import import_job_create
from tests.api.conftest import WRITE_PERMISSIONS, grant
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db

TAKEN = "the source name 'utility-study-gpt3' is taken by a source you may not see: choose another source name"


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def _researcher(username: str):
    """A researcher with the API's write permissions (as the API tests' ``researcher``)."""
    return grant(get_user_model().objects.create_user(username=username, password=f"pw-{username}"),
                 *WRITE_PERMISSIONS)


def client_for(user) -> APIClient:
    _, key = api_token_create(user=user, name="test", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def lab(media):
    """Dana's open study on "utility-study-dataset" with her sources utility-study-gpt3 and -t5;
    Olga's open study on her dataset "olga-ds-dataset" (items olga-ds-q0, olga-ds-q1)."""
    dana, olga = _researcher("dana"), _researcher("olga")
    open_utility_study(name="utility-study", owner=dana, source_names=["utility-study-gpt3", "utility-study-t5"])
    open_utility_study(name="olga-ds", owner=olga)
    return {"dana": dana, "olga": olga}


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _rationales(source: str | None = None) -> bytes:
    return _jsonl({"item_id": f"olga-ds-q{i}", "rationale": f"Because of {i}.", **({"source": source} if source else {})}
                  for i in range(2))


def _stored(media) -> list:
    return [p for p in (media / "imports").rglob("*") if p.is_file()] if (media / "imports").exists() else []


def _post(client, settings, *, background: bool, name: str, content: bytes, **form):
    settings.RL_IMPORT_BACKGROUND_BYTES = 10 if background else 10_000_000
    upload = SimpleUploadedFile(name, content)
    return client.post("/api/v1/imports/", {"file": upload, **form}, format="multipart")


REFUSED = [
    pytest.param(dict(kind="rationales", dataset="olga-ds-dataset", source="utility-study-gpt3"), _rationales(),
                 [(None, "source", TAKEN)], id="rationales-source-of-another"),
    pytest.param(dict(kind="rationales", dataset="utility-study-dataset", source="olgas-own"), _rationales(),
                 [(None, "", "unknown dataset 'utility-study-dataset' (known: olga-ds-dataset); import its items first")],
                 id="rationales-dataset-of-another"),
    pytest.param(dict(kind="generalization", dataset="utility-study-dataset"),
                 json.dumps({"Is it true?": [["Is it so?", "True", "rephrase"]]}).encode(),
                 [(None, "", "unknown dataset 'utility-study-dataset' (known: olga-ds-dataset); import its items first")],
                 id="generalization-dataset-of-another"),
    pytest.param(dict(kind="items", dataset="utility-study-dataset", task_format="yes_no"),
                 _jsonl([{"id": "x", "question": "Planted?", "answer": "yes"}]),
                 [(None, "", "the dataset name 'utility-study-dataset' is taken by a dataset you may not see: "
                             "choose another dataset name")], id="items-dataset-of-another"),
    pytest.param(dict(kind="strategyqa", dataset="utility-study-dataset"),
                 json.dumps([{"qid": "x", "question": "Planted?", "answer": True}]).encode(),
                 [(None, "", "the dataset name 'utility-study-dataset' is taken by a dataset you may not see: "
                             "choose another dataset name")], id="strategyqa-dataset-of-another"),
    pytest.param(dict(kind="openbookqa", dataset="olga-ds-dataset"),
                 _jsonl([{"id": "x", "question": {"stem": "Planted?", "choices": [
                     {"label": c, "text": f"option {c}"} for c in "ABCD"]}, "answerKey": "A"}]),
                 [(None, "", "dataset 'olga-ds-dataset' exists with task format 'Yes / no'; this file is "
                             "'Multiple choice': choose another dataset name")], id="openbookqa-format-of-dataset"),
]


@pytest.mark.parametrize(("form", "content", "errors"), REFUSED)
def test_a_large_file_is_refused_for_its_target_as_the_small_one_is_and_nothing_is_stored(
        lab, settings, media, form, content, errors, django_capture_on_commit_callbacks):
    olga = client_for(lab["olga"])
    inline = _post(olga, settings, background=False, name="upload.jsonl", content=content, **form)
    with django_capture_on_commit_callbacks(execute=True) as queued:
        large = _post(olga, settings, background=True, name="upload.jsonl", content=content, **form)

    assert inline.status_code == 400, inline.content
    assert [(e["line"], e["field"], e["reason"]) for e in inline.json()["errors"]] == errors
    assert (large.status_code, large.json()) == (400, inline.json())
    assert not queued and not ImportJob.objects.exists() and not _stored(media)


def test_the_service_refuses_before_storing_the_upload(lab, media):
    upload = SimpleUploadedFile("big-rationales.jsonl", _rationales())
    with pytest.raises(ImportValidationError) as refused:
        import_job_create(kind="rationales", file=upload, user=lab["olga"],
                          options={"dataset_name": "olga-ds-dataset", "source_name": "utility-study-gpt3"})
    assert [(e.field, e.reason) for e in refused.value.errors] == [("source", TAKEN)]
    assert str(refused.value) == f"big-rationales.jsonl: nothing imported: file: field 'source': {TAKEN}"
    assert not ImportJob.objects.exists() and not _stored(media)
    # Named on a row instead, the source is refused by the job, line by line, as inline.
    with pytest.raises(ImportValidationError) as inline:
        import_run(kind="rationales", file=SimpleUploadedFile("r.jsonl", _rationales("utility-study-gpt3")),
                   dataset_name="olga-ds-dataset", user=lab["olga"])
    assert [(e.line, e.field) for e in inline.value.errors] == [(1, "source"), (2, "source")]


def test_a_large_file_for_the_researchers_own_target_is_still_queued_and_imported(
        lab, settings, media, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as queued:
        response = _post(client_for(lab["olga"]), settings, background=True, name="big.jsonl",
                         content=_rationales(), kind="rationales", dataset="olga-ds-dataset", source="olgas-own")
    assert response.status_code == 202, response.content
    assert len(queued) == 1
    job = ImportJob.objects.get()
    assert job.status == ImportJob.Status.DONE, job.error
    assert Rationale.objects.filter(source__name="olgas-own").count() == 2
    assert ImportRecord.objects.filter(kind="rationales").count() == 1
    # Dana's source is as it was.
    assert not Rationale.objects.filter(source__name="utility-study-gpt3", item__dataset__name="olga-ds-dataset").exists()
    assert RationaleSource.objects.filter(name="utility-study-gpt3").count() == 1
