"""GET /api/v1/studies/<id>/bundle/ and POST /api/v1/studies/import-bundle/: who may, and what
comes back."""
from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from scoring.services import study_score
from studies.models import Study, StudyShare
from studies.services.sharing import study_share

pytestmark = pytest.mark.django_db


def _download(client, pk: int) -> bytes:
    response = client.get(f"/api/v1/studies/{pk}/bundle/")
    assert response.status_code == 200, response.content[:300]
    assert response.streaming and response["Content-Type"] == "application/zip"
    assert f"study-{pk}-bundle.zip" in response["Content-Disposition"]
    return b"".join(response.streaming_content)


def _upload(client, data: bytes, name: str):
    return client.post("/api/v1/studies/import-bundle/",
                       {"file": SimpleUploadedFile("bundle.zip", data, content_type="application/zip"), "name": name},
                       format="multipart")


def test_the_owner_downloads_the_bundle_and_imports_it_as_a_closed_study_of_their_own(client_for, study_data):
    dana = client_for(study_data.study.owner)
    data = _download(dana, study_data.study.pk)
    assert "data/annotations.csv" in zipfile.ZipFile(io.BytesIO(data)).namelist()

    response = _upload(dana, data, "dana's copy")

    assert response.status_code == 201, response.json()
    copy = Study.objects.get(pk=response.json()["id"])
    assert copy.owner == study_data.study.owner and copy.status == Study.Status.CLOSED
    rescored = study_score(study=copy, similarity=False)
    assert rescored.results["utility_shares"] == study_data.run.results["utility_shares"]


def test_another_researcher_gets_404_and_a_shared_researcher_gets_the_bundle(client_for, study_data, other_researcher):
    olga = client_for(other_researcher)
    assert olga.get(f"/api/v1/studies/{study_data.study.pk}/bundle/").status_code == 404
    study_share(study=study_data.study, user=study_data.study.owner, with_user=other_researcher,
                level=StudyShare.Level.VIEW)
    _download(olga, study_data.study.pk)


def test_importing_needs_a_writing_token_and_the_add_study_permission(client_for, study_data, make_user):
    data = _download(client_for(study_data.study.owner), study_data.study.pk)
    assert _upload(client_for(study_data.study.owner, read_only=True), data, "copy").status_code == 403
    assert _upload(client_for(make_user("nobody")), data, "copy").status_code == 403
    assert not Study.objects.filter(name="copy").exists()


def test_a_changed_bundle_is_a_400_naming_the_file_and_the_field(client_for, study_data):
    dana = client_for(study_data.study.owner)
    src, out = zipfile.ZipFile(io.BytesIO(_download(dana, study_data.study.pk))), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            content = src.read(name)
            dst.writestr(name, content + b"\n" if name == "data/units.csv" else content)

    response = _upload(dana, out.getvalue(), "copy")

    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["record"], error["field"]) == ("data/units.csv", "sha256")
    assert not Study.objects.filter(name="copy").exists()
