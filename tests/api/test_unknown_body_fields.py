"""A request body key that the write endpoint does not read is a 400 naming it, and nothing is
written: a misspelt field must not fall back to its default (a study with 5 annotators per unit
instead of 10, a generation job over the whole split instead of the one item asked for). And a
method the route does not map is 405, not a 403 that reads as a missing right."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from annotations.models import Withdrawal
from scoring.models import ScoreRun
from studies.models import GenerationJob, ImportRecord, RationaleSource, Study
from tests.api.conftest import grant
from tests.api.test_write_endpoints import JOB_STARTER, STRATEGYQA_ROWS, design
from tests.factories import DatasetFactory, ItemFactory, RationaleSourceFactory

pytestmark = pytest.mark.django_db


def _errors(response) -> dict:
    assert response.status_code == 400, (response.status_code, response.content)
    return response.json()


# --- Studies ------------------------------------------------------------------------------
def test_a_misspelt_design_field_is_400_naming_each_and_creates_no_study(client_for, researcher, study_data):
    client = client_for(researcher)
    body = design(study_data.study.dataset, study_data.sources, name="typo-study")
    body.pop("annotators_per_unit")
    body.update(annotator_per_unit=10, sharedwith=["olga"])

    errors = _errors(client.post("/api/v1/studies/", body, format="json"))

    assert set(errors) == {"annotator_per_unit", "sharedwith"}
    assert errors["annotator_per_unit"][0].startswith("Unknown field 'annotator_per_unit'")
    assert "annotators_per_unit" in errors["annotator_per_unit"][0]  # it lists what the endpoint accepts
    assert not Study.objects.filter(name="typo-study").exists()


def test_a_read_only_study_field_sent_says_it_is_read_only(client_for, researcher, study_data, make_user):
    body = design(study_data.study.dataset, study_data.sources, name="owned-by-me",
                  owner="someone-else", status="open", id=999)
    errors = _errors(client_for(researcher).post("/api/v1/studies/", body, format="json"))
    assert set(errors) == {"owner", "status", "id"}
    assert all("is read-only" in errors[key][0] for key in errors), errors
    assert not Study.objects.filter(name="owned-by-me").exists()


def test_an_unknown_key_is_named_beside_the_other_fields_errors(client_for, researcher, study_data):
    body = design(study_data.study.dataset, study_data.sources, annotators_per_unit=0, colour="blue")
    errors = _errors(client_for(researcher).post("/api/v1/studies/", body, format="json"))
    assert {"annotators_per_unit", "colour"} <= set(errors)


def test_the_right_design_keys_still_create_the_study(client_for, researcher, other_researcher, study_data):
    body = design(study_data.study.dataset, study_data.sources, name="spelt-right", annotators_per_unit=10,
                  shared_with=[other_researcher.username], share_level="view", sample_seed=3)
    response = client_for(researcher).post("/api/v1/studies/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["annotators_per_unit"] == 10 and response.json()["shared_with"] == ["olga"]


def test_a_browsable_api_form_post_may_carry_its_csrf_token(client_for, researcher, study_data):
    body = design(study_data.study.dataset, study_data.sources, name="form-study", csrfmiddlewaretoken="x")
    body.pop("sources")
    body["sources"] = study_data.sources[0].name
    response = client_for(researcher).post("/api/v1/studies/", body, format="multipart")
    assert response.status_code == 201, response.json()


# --- Generation jobs ----------------------------------------------------------------------
@pytest.fixture
def split_of_three(db):
    dataset = DatasetFactory(name="gen-dataset")
    items = [ItemFactory(dataset=dataset, split="test") for _ in range(3)]
    source = RationaleSourceFactory(name="tiny-t5", kind=RationaleSource.Kind.LM, backend="seq2seq",
                                    model_name_or_path="/models/tiny-t5")
    return source, dataset, items


def test_items_for_item_ids_is_400_and_starts_no_job_over_the_split(client_for, make_user, split_of_three):
    source, dataset, items = split_of_three
    client = client_for(grant(make_user("priya"), *JOB_STARTER))
    body = {"kind": "rationales", "source": source.name, "dataset": dataset.name, "split": "test"}

    errors = _errors(client.post("/api/v1/generation-jobs/", {**body, "items": [items[0].pk]}, format="json"))

    assert list(errors) == ["items"] and "Unknown field 'items'" in errors["items"][0]
    assert "item_ids" in errors["items"][0]
    assert not GenerationJob.objects.exists()
    response = client.post("/api/v1/generation-jobs/", {**body, "item_ids": [items[0].pk]}, format="json")
    assert response.status_code == 202, response.json()
    assert response.json()["total"] == 1


def test_a_jobs_read_only_fields_are_refused_as_read_only(client_for, make_user, split_of_three):
    source, dataset, _ = split_of_three
    client = client_for(grant(make_user("priya"), *JOB_STARTER))
    body = {"kind": "rationales", "source": source.name, "dataset": dataset.name, "status": "done", "total": 1}
    errors = _errors(client.post("/api/v1/generation-jobs/", body, format="json"))
    assert set(errors) == {"status", "total"} and "is read-only" in errors["status"][0]
    assert not GenerationJob.objects.exists()


# --- Score runs ---------------------------------------------------------------------------
def test_an_unknown_score_run_key_is_400_and_queues_nothing(client_for, researcher, study_data):
    client = client_for(researcher)
    before = ScoreRun.objects.count()
    errors = _errors(client.post("/api/v1/score-runs/", {"study": study_data.study.pk, "similarity": False},
                                 format="json"))
    assert list(errors) == ["similarity"] and "Unknown field 'similarity'" in errors["similarity"][0]
    assert ScoreRun.objects.count() == before


# --- Withdrawals --------------------------------------------------------------------------
def test_an_unknown_withdrawal_key_is_400_and_withdraws_nobody(client_for, researcher, study_data):
    grant(researcher, "studies.change_study")
    client = client_for(researcher)
    url = f"/api/v1/studies/{study_data.study.pk}/withdrawals/"
    leaving = study_data.participants[1]
    errors = _errors(client.post(url, {"worker_id": leaving.external_id, "reason": "asked"}, format="json"))
    assert list(errors) == ["reason"]
    assert not Withdrawal.objects.exists()
    assert client.post(url, {"worker_id": leaving.external_id}, format="json").status_code == 201


# --- Imports (multipart) ------------------------------------------------------------------
def _upload() -> SimpleUploadedFile:
    return SimpleUploadedFile("sqa_test.json", json.dumps(STRATEGYQA_ROWS).encode(), content_type="application/json")


def test_an_unknown_import_form_field_is_400_and_imports_nothing(client_for, researcher):
    client = client_for(researcher)
    form = {"kind": "strategyqa", "dataset": "sqa-typo", "spilt": "dev", "file": _upload()}
    errors = _errors(client.post("/api/v1/imports/", form, format="multipart"))
    assert list(errors) == ["spilt"]
    assert not ImportRecord.objects.exists()
    form = {"kind": "strategyqa", "dataset": "sqa-typo", "split": "dev", "file": _upload()}
    response = client.post("/api/v1/imports/", form, format="multipart")
    assert response.status_code == 201, response.json()


def test_an_unknown_bundle_import_form_field_is_400_and_imports_nothing(client_for, researcher):
    before = Study.objects.count()
    form = {"file": SimpleUploadedFile("b.zip", b"PK\x05\x06" + bytes(18)), "nmae": "copy"}
    errors = _errors(client_for(researcher).post("/api/v1/studies/import-bundle/", form, format="multipart"))
    assert list(errors) == ["nmae"]
    assert Study.objects.count() == before


# --- Methods a route does not map -------------------------------------------------------
@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_a_write_method_a_resource_does_not_map_is_405(client_for, make_user, study_data, method):
    owner = study_data.study.owner
    owner.is_superuser = True
    owner.save()
    client = client_for(owner)
    response = getattr(client, method)(f"/api/v1/studies/{study_data.study.pk}/", {"name": "renamed"},
                                       format="json")
    assert response.status_code == 405, response.json()
    assert "GET" in response["Allow"] and method.upper() not in response["Allow"]
    assert Study.objects.filter(pk=study_data.study.pk, name=study_data.study.name).exists()
    # Also with a read-only token: the method is not there to be refused.
    response = getattr(client_for(owner, read_only=True), method)(f"/api/v1/studies/{study_data.study.pk}/")
    assert response.status_code == 405


def test_a_mapped_write_without_the_permission_stays_403(client_for, make_user, study_data):
    response = client_for(make_user("reader")).post("/api/v1/score-runs/", {"study": study_data.study.pk},
                                                    format="json")
    assert response.status_code == 403 and "scoring.add_scorerun" in response.json()["detail"]
