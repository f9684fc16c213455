"""The bundle in the admin: the study page's download button, the import page (a good bundle
becomes a closed study; a bad one lists its file, row, field and reason), and who may."""
from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotations.models import Annotation
from scoring.services import study_score
from studies.models import Study
from tests.api.conftest import build_study
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


def _download(client, study) -> bytes:
    page = client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    url = reverse("admin:studies_study_bundle", args=[study.pk])
    assert f'href="{url}"' in page
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    return b"".join(response.streaming_content)


def _post(client, data: bytes, name: str):
    return client.post(reverse("admin:studies_study_import_bundle"),
                       {"file": SimpleUploadedFile("bundle.zip", data), "name": name})


def test_a_researcher_downloads_a_bundle_from_the_study_page_and_imports_it(dana):
    user, client = dana
    data = build_study(user)
    bundle = _download(client, data.study)
    assert reverse("admin:studies_study_import_bundle") in client.get(
        reverse("admin:studies_study_changelist")).content.decode()

    response = _post(client, bundle, "imported copy")

    copy = Study.objects.get(name="imported copy")
    assert response.status_code == 302 and response["Location"] == reverse("admin:studies_study_change",
                                                                            args=[copy.pk])
    assert copy.owner == user and copy.status == Study.Status.CLOSED
    assert Annotation.objects.filter(claim__study=copy).count() == len(data.annotations)
    assert study_score(study=copy, similarity=False).results["utility_shares"] == data.run.results["utility_shares"]


def test_a_bad_bundle_is_listed_by_file_row_field_and_reason(dana):
    user, client = dana
    src, out = zipfile.ZipFile(io.BytesIO(_download(client, build_study(user).study))), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name).replace(b"utility-study-gpt3", b"x", 1)
                         if name == "data/rationales.csv" else src.read(name))

    page = _post(client, out.getvalue(), "imported copy").content.decode()

    assert 'id="bundle-errors"' in page and "<td>data/rationales.csv</td>" in page and "<td>sha256</td>" in page
    assert not Study.objects.filter(name="imported copy").exists()


def test_another_researcher_cannot_download_it_and_a_viewer_cannot_import(dana):
    user, _ = dana
    study = build_study(user).study
    _, olga = staff_client("olga")
    assert olga.get(reverse("admin:studies_study_bundle", args=[study.pk])).status_code == 404
    _, viewer = staff_client("vic", perms=False)
    assert viewer.get(reverse("admin:studies_study_import_bundle")).status_code in (302, 403)
