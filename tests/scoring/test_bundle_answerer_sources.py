"""A study bundle's ``answerer_sources`` (the fine-tuned sources Gen-U's answerers name, which the
study uses without listing them) carry their settings only for a reader who may read them
(``sources_for_user``, the API's rule for sources); for anyone else the bundle names the model its
Gen-U predictions already name and says the rest is withheld: not the source's name, endpoint,
template or training, which are another researcher's."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from scoring.services.bundle import bundle_import, bundle_stream
from studies.api.tokens import api_token_create
from studies.models import GenUPrediction, RationaleSource
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, GeneralizationQuestionFactory, ItemFactory, RationaleFactory

pytestmark = pytest.mark.django_db

SECRET_URL = "https://alice-finetune.example/v1"
SECRET_TEMPLATE = "ALICE-FT-TEMPLATE {question}"
SECRET_PRESET = "alice-secret-preset"


def api(user) -> APIClient:
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def lab():
    """Bob's study over a public source whose Gen-U predictions Alice's fine-tuned model answered."""
    alice, _ = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    dataset = DatasetFactory(name="public-ds")
    items = [ItemFactory(dataset=dataset, external_id=f"q{i}") for i in range(2)]
    source = RationaleSource.objects.create(name="bob-src", kind=RationaleSource.Kind.IMPORTED)
    finetuned = RationaleSource.objects.create(
        name="alice-ft", kind=RationaleSource.Kind.LM, backend="openai", model_name_or_path="alice-ft-model",
        endpoint_url=SECRET_URL, template=SECRET_TEMPLATE, training={"preset": SECRET_PRESET, "data": {"n": 7}})
    for item in items:
        RationaleFactory(item=item, source=source)
        question = GeneralizationQuestionFactory(item=item)
        GenUPrediction.objects.create(generalization_question=question, rationale_source=source, answerer="I",
                                      answerer_model="alice-ft-model", predicted_answer="yes", correct=True)
    study_create(name="alice-study", dataset=dataset, sources=[finetuned], owner=alice, consent_text="ok")
    bobs = study_create(name="bobs-study", dataset=dataset, sources=[source], owner=bob, consent_text="ok")
    return {"alice": alice, "bob": bob, "bobs": bobs, "finetuned": finetuned}


def _design(data: bytes) -> dict:
    return json.loads(zipfile.ZipFile(io.BytesIO(data)).read("study.json"))


def test_bob_downloads_his_bundle_without_the_settings_of_alices_fine_tuned_answerer(lab):
    bob, bobs = lab["bob"], lab["bobs"]
    assert "alice-ft" not in api(bob).get("/api/v1/rationale-sources/").content.decode()  # the selector's rule

    response = api(bob).get(f"/api/v1/studies/{bobs.pk}/bundle/")

    assert response.status_code == 200
    data = b"".join(response.streaming_content)
    design = _design(data)
    [answerer] = design["answerer_sources"]
    assert answerer["model_name_or_path"] == "alice-ft-model" and "not read" in answerer["withheld"]
    assert set(answerer) == {"model_name_or_path", "withheld"}
    study_json = json.dumps(design)
    assert not [s for s in (SECRET_URL, SECRET_TEMPLATE, SECRET_PRESET, '"alice-ft"') if s in study_json]
    # the bundle still imports (the withheld answerer is not made)
    sources = RationaleSource.objects.count()
    bundle_import(file=io.BytesIO(data), name="bobs-copy", owner=bob)
    assert RationaleSource.objects.count() == sources


def test_a_reader_of_the_answerer_source_gets_its_settings_and_so_does_the_operator(lab):
    bob, bobs = lab["bob"], lab["bobs"]
    assert _design(b"".join(bundle_stream(study=bobs, user=bob)))["answerer_sources"][0].keys() == {
        "model_name_or_path", "withheld"}

    bob.user_permissions.add(Permission.objects.get(content_type__app_label="studies",
                                                    codename="view_rationalesource"))
    bob = type(bob).objects.get(pk=bob.pk)
    for reader in (bob, None):
        [answerer] = _design(b"".join(bundle_stream(study=bobs, user=reader)))["answerer_sources"]
        assert (answerer["name"], answerer["endpoint_url"], answerer["template"], answerer["training"]) == (
            "alice-ft", SECRET_URL, SECRET_TEMPLATE, {"preset": SECRET_PRESET, "data": {"n": 7}})
