"""A study's sample seed is held to its 32-bit column on every database: POST /api/v1/studies/ with
one past it is a 400 naming ``sample_seed`` (not non_field_errors, and the same on SQLite, whose
column would hold it, as on PostgreSQL); a study bundle whose study.json carries one is refused the
same way. A design the model's own checks refuse names the field too (``StudyError.problems``)."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from studies.models import Study
from studies.services.studies import StudyError, study_create
from tests.scoring.test_bundle import _resign, _rewrite

pytestmark = pytest.mark.django_db


def _design(study_data, **changes) -> dict:
    """A design on the dataset and sources of the researcher's own study (theirs to build on)."""
    return {"name": "seeded", "dataset": study_data.study.dataset.name, "sources": [s.name for s in study_data.sources],
            "consent_text": "ok", **changes}


@pytest.mark.parametrize("seed", [2**31, 2**40, -(2**31) - 1])
def test_a_sample_seed_past_its_column_is_a_400_naming_the_field(client_for, study_data, seed):
    response = client_for(study_data.study.owner).post("/api/v1/studies/", _design(study_data, sample_seed=seed),
                                                       format="json")

    assert response.status_code == 400, response.content[:300]
    assert list(response.json()) == ["sample_seed"]
    assert not Study.objects.filter(name="seeded").exists()


@pytest.mark.parametrize("seed", [2**31 - 1, -(2**31)])
def test_a_sample_seed_at_its_column_s_ends_is_kept(client_for, study_data, seed):
    response = client_for(study_data.study.owner).post("/api/v1/studies/", _design(study_data, sample_seed=seed),
                                                       format="json")

    assert response.status_code == 201, response.json()
    assert Study.objects.get(name="seeded").sample_seed == seed


def test_the_model_s_own_refusal_names_the_field(study_data):
    """``_full_clean``'s problems come back per field (the API files them beside the field, not
    under non_field_errors): here the name, past its 200 characters."""
    with pytest.raises(StudyError) as refused:
        study_create(name="n" * 201, dataset=study_data.study.dataset, sources=study_data.sources, consent_text="ok")
    assert list(refused.value.problems) == ["name"]
    assert "200 characters" in refused.value.problems["name"]


def test_a_bundle_whose_sample_seed_is_past_its_column_is_a_400(client_for, study_data):
    """The same bundle is refused on every database (SQLite's column would have kept it, PostgreSQL
    refused it): a 400 naming study.json's ``study.sample_seed``."""
    dana = client_for(study_data.study.owner)
    data = b"".join(dana.get(f"/api/v1/studies/{study_data.study.pk}/bundle/").streaming_content)

    def edit(content: bytes) -> bytes:
        design = json.loads(content)
        design["study"]["sample_seed"] = 2**40
        return json.dumps(design).encode()
    edited = _resign(_rewrite(data, "study.json", edit))

    response = dana.post("/api/v1/studies/import-bundle/",
                         {"file": SimpleUploadedFile("bundle.zip", edited, content_type="application/zip"),
                          "name": "seeded copy"}, format="multipart")

    assert response.status_code == 400, response.content[:300]
    assert "study.sample_seed" in json.dumps(response.json())
    assert "out of range" in json.dumps(response.json())
    assert not Study.objects.filter(name="seeded copy").exists()
