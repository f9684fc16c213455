"""The outcomes import and the study bundle import find a dataset or a rationale source by name only
among those the importing researcher may see (``datasets_for_user``, ``sources_for_user``: what
``study_insert`` lets a study use). Another researcher's dataset or source of that name is answered
as a missing one: a new one of the importer's own is made from the file (under ``NAME (STUDY)``,
names being unique here), so the import neither brings her source, its settings or its rationales
into view, nor tells her rows' fields (no "exists here with another template" to guess them by).

Alice and Bob are staff researchers holding the apps' model permissions but not those that read
every dataset, item, source and rationale (``researcher_without_reference_views``)."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from scoring.models import UnitScore
from scoring.services import outcomes_study_create
from scoring.services.bundle import bundle_stream
from studies.api.tokens import api_token_create
from studies.models import Dataset, ImportRecord, Item, RationaleSource, Study
from studies.services.importers import ImportValidationError
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory
from tests.scoring.test_import_rights import _bundle_with

pytestmark = pytest.mark.django_db

SECRET_URL = "https://alice-private.example/v1"
SECRET_TEMPLATE = "ALICE-SECRET-TEMPLATE {question}"
SECRET_RATIONALE = "ALICE-PRIVATE-RATIONALE-TEXT"
SECRET_QUESTION = "Alice's private question?"


def api(user) -> APIClient:
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def lab():
    """A public dataset with Bob's source (his study) and Alice's private source (her study) over
    its items; Alice's private dataset whose items share the public ones' external ids."""
    alice, _ = researcher_without_reference_views("alice")
    bob, bob_client = researcher_without_reference_views("bob")
    public = DatasetFactory(name="public-ds")
    items = [ItemFactory(dataset=public, external_id=f"q{i}", question=f"Public question {i}?") for i in range(2)]
    bobs_source = RationaleSourceFactory(name="bob-src")
    private = RationaleSource.objects.create(name="alice-private", kind=RationaleSource.Kind.LM, backend="openai",
                                             model_name_or_path="alice-model", endpoint_url=SECRET_URL,
                                             template=SECRET_TEMPLATE)
    for item in items:
        RationaleFactory(item=item, source=bobs_source, text=f"Bob's rationale of {item.external_id}.")
        RationaleFactory(item=item, source=private, text=SECRET_RATIONALE)
    alice_ds = DatasetFactory(name="alice-ds")
    for i in range(2):
        ItemFactory(dataset=alice_ds, external_id=f"q{i}", question=f"{SECRET_QUESTION} {i}")
    study_create(name="alice-study", dataset=public, sources=[private], owner=alice, consent_text="ok")
    study_create(name="alice-ds-study", dataset=alice_ds, sources=[private], owner=alice, consent_text="ok")
    bobs = study_create(name="bobs-study", dataset=public, sources=[bobs_source], owner=bob, consent_text="ok")
    return {"alice": alice, "bob": bob, "bob_client": bob_client, "public": public, "private": private,
            "alice_ds": alice_ds, "bobs_source": bobs_source, "bobs": bobs}


def _what_bob_reads(bob, study: Study) -> str:
    client = api(bob)
    return (client.get("/api/v1/rationale-sources/").content.decode()
            + client.get(f"/api/v1/rationales/?study={study.pk}").content.decode())


def _secrets_in(text: str) -> list[str]:
    return [s for s in (SECRET_URL, SECRET_TEMPLATE, SECRET_RATIONALE, SECRET_QUESTION) if s in text]


# --- outcomes ------------------------------------------------------------------------------------


def _outcomes(*sources: str) -> bytes:
    return b"".join(json.dumps({
        "question": "Public question 0?", "rationale_source": name, "ground_truth_label": "yes",
        "human_predicted_label_before_rationale": "yes", "human_predicted_label_after_rationale": "yes",
    }).encode() + b"\n" for name in sources)


def test_an_outcomes_file_naming_another_researchers_source_gets_a_new_source_of_the_importers_own(lab):
    bob, private = lab["bob"], lab["private"]
    response = lab["bob_client"].post("/admin/scoring/scorerun/import-outcomes/", {
        "file": SimpleUploadedFile("outcomes.jsonl", _outcomes("alice-private", "bob-src")),
        "dataset": lab["public"].pk, "split": "test", "study": "bob-outcomes"})

    assert response.status_code == 302, response.content.decode()[:2000]
    study = Study.objects.get(name="bob-outcomes")
    mine = RationaleSource.objects.get(name="alice-private (bob-outcomes)")
    assert set(study.sources.all()) == {mine, lab["bobs_source"]} and private not in study.sources.all()
    assert (mine.kind, mine.endpoint_url, mine.template) == (RationaleSource.Kind.IMPORTED, "", "")
    assert set(UnitScore.objects.filter(study=study).values_list("source__name", flat=True)) == {
        "alice-private (bob-outcomes)", "bob-src"}
    assert _secrets_in(_what_bob_reads(bob, study)) == []
    summary = ImportRecord.objects.get(kind="outcomes").summary
    assert summary["sources_renamed"] == {"alice-private": "alice-private (bob-outcomes)"}
    private.refresh_from_db()
    assert (private.endpoint_url, private.template) == (SECRET_URL, SECRET_TEMPLATE)

    # Importing the same file again finds what the first import made: nothing changes.
    sources = RationaleSource.objects.count()
    _, again = outcomes_study_create(name="bob-outcomes", dataset=lab["public"],
                                     file=io.BytesIO(_outcomes("alice-private", "bob-src")), user=bob, owner=bob)
    assert (again["created"], again["unchanged"], again["sources_created"]) == (0, 2, [])
    assert RationaleSource.objects.count() == sources and set(study.sources.all()) == {mine, lab["bobs_source"]}


def test_another_researchers_dataset_is_neither_offered_nor_taken_for_an_outcomes_import(lab):
    bob, client = lab["bob"], lab["bob_client"]
    page = client.get("/admin/scoring/scorerun/import-outcomes/").content.decode()
    assert "public-ds" in page and "alice-ds" not in page

    def post(dataset_pk):
        return client.post("/admin/scoring/scorerun/import-outcomes/", {
            "file": SimpleUploadedFile("outcomes.jsonl", _outcomes("bob-src")), "dataset": dataset_pk,
            "split": "test", "study": "bob-outcomes"})

    hidden, missing = post(lab["alice_ds"].pk), post(Dataset.objects.order_by("pk").last().pk + 1000)
    assert hidden.status_code == missing.status_code == 200
    assert hidden.context["form"].errors == missing.context["form"].errors
    assert "dataset" in hidden.context["form"].errors

    # The service refuses it too, whoever calls, by id only.
    with pytest.raises(ImportValidationError) as refused:
        outcomes_study_create(name="bob-outcomes", dataset=lab["alice_ds"], file=io.BytesIO(_outcomes("bob-src")),
                              user=bob, owner=bob)
    assert "not found or not yours to use" in str(refused.value.errors[0].reason)
    assert "alice-ds" not in " ".join(e.reason for e in refused.value.errors)
    assert not Study.objects.filter(name="bob-outcomes").exists()


# --- study bundles -------------------------------------------------------------------------------


def _upload(bob, data: bytes, name: str):
    return api(bob).post("/api/v1/studies/import-bundle/",
                         {"file": SimpleUploadedFile("bundle.zip", data, content_type="application/zip"),
                          "name": name}, format="multipart")


def _with_sources(study: Study, *specs: dict, answerers: tuple[dict, ...] = ()) -> bytes:
    def change(files):
        design = json.loads(files["study.json"])
        design["sources"].extend(specs)
        design["answerer_sources"].extend(answerers)
        files["study.json"] = json.dumps(design).encode()
    return _bundle_with(study, change)


def test_a_bundle_naming_another_researchers_source_gets_a_new_source_whatever_its_settings(lab):
    """No guessing: the right template and a wrong one get the same answer, a new source of Bob's."""
    bob, private = lab["bob"], lab["private"]
    copies = {}
    for guess, template in (("wrong", "guess {question}"), ("right", SECRET_TEMPLATE)):
        spec = {"name": "alice-private", "kind": "lm", "backend": "openai", "model_name_or_path": "alice-model",
                "template": template}
        response = _upload(bob, _with_sources(lab["bobs"], spec), f"bob-{guess}")
        assert response.status_code == 201, response.content.decode()
        copies[guess] = Study.objects.get(pk=response.json()["id"])

    for guess, copy in copies.items():
        mine = RationaleSource.objects.get(name=f"alice-private (bob-{guess})")
        assert set(copy.sources.all()) == {lab["bobs_source"], mine} and private not in copy.sources.all()
        read = _what_bob_reads(bob, copy)  # (the right guess's template is now Bob's own source's)
        assert mine.endpoint_url == "" and SECRET_URL not in read and SECRET_RATIONALE not in read
        assert ImportRecord.objects.get(summary__study=copy.pk).summary["renamed"] == {
            "sources": {"alice-private": mine.name}}
    assert RationaleSource.objects.get(name="alice-private (bob-right)").template == SECRET_TEMPLATE
    assert RationaleSource.objects.get(name="alice-private (bob-wrong)").template == "guess {question}"


def test_a_bundle_naming_another_researchers_dataset_gets_a_new_dataset_with_the_bundles_items(lab):
    bob = lab["bob"]

    def rename_dataset(files):
        design = json.loads(files["study.json"])
        design["dataset"]["name"] = "alice-ds"
        files["study.json"] = json.dumps(design).encode()

    response = _upload(bob, _bundle_with(lab["bobs"], rename_dataset), "bob-copy")

    assert response.status_code == 201, response.content.decode()  # not "differs from item 'q0' of 'alice-ds'"
    copy = Study.objects.get(pk=response.json()["id"])
    assert copy.dataset.name == "alice-ds (bob-copy)" and copy.dataset != lab["alice_ds"]
    assert sorted(copy.items.values_list("question", flat=True)) == ["Public question 0?", "Public question 1?"]
    assert not copy.items.filter(dataset=lab["alice_ds"]).exists()
    assert Item.objects.filter(dataset=lab["alice_ds"]).count() == 2


def test_a_bundles_answerer_sources_are_found_among_the_importers_and_a_withheld_one_is_not_made(lab):
    bob = lab["bob"]
    answerers = ({"name": "alice-private", "kind": "lm", "backend": "openai", "model_name_or_path": "bundle-ft",
                  "training": {"preset": "bundle"}},
                 {"model_name_or_path": "someone-elses-ft", "withheld": "not readable by the bundle's maker"})
    sources = RationaleSource.objects.count()

    response = _upload(bob, _with_sources(lab["bobs"], answerers=answerers), "bob-answerers")

    assert response.status_code == 201, response.content.decode()
    mine = RationaleSource.objects.get(name="alice-private (bob-answerers)")
    assert (mine.model_name_or_path, mine.training) == ("bundle-ft", {"preset": "bundle"})
    assert RationaleSource.objects.count() == sources + 1  # the withheld answerer is not made
    private = lab["private"]
    private.refresh_from_db()
    assert (private.model_name_or_path, private.training) == ("alice-model", {})


def test_a_bundle_still_uses_a_source_and_dataset_the_importer_may_see(lab):
    """Bob's own source and the dataset his study uses are found by name as before (and a changed
    setting of what he may read is still refused with the field that differs)."""
    bob = lab["bob"]
    response = _upload(bob, b"".join(bundle_stream(study=lab["bobs"], user=lab["bob"])), "bob-plain")
    assert response.status_code == 201, response.content.decode()
    copy = Study.objects.get(pk=response.json()["id"])
    assert copy.dataset == lab["public"] and list(copy.sources.all()) == [lab["bobs_source"]]

    def retemplate(files):
        design = json.loads(files["study.json"])
        design["sources"][0]["template"] = "another {question}"
        files["study.json"] = json.dumps(design).encode()

    refused = _upload(bob, _bundle_with(lab["bobs"], retemplate), "bob-retemplated")
    assert refused.status_code == 400 and "exists here with another template" in refused.content.decode()


def test_csv_rows_of_a_renamed_source_follow_it(lab):
    """The bundle's tables name sources by the bundle's names: a rationale row of the renamed
    source becomes the new source's rationale, never Alice's."""
    bob, private = lab["bob"], lab["private"]
    item = lab["bobs"].items.order_by("pk").first()

    def add(files):
        design = json.loads(files["study.json"])
        design["sources"].append({"name": "alice-private", "kind": "imported"})
        files["study.json"] = json.dumps(design).encode()
        text = files["data/rationales.csv"].decode()
        header = next(csv.reader(io.StringIO(text)))
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\r\n").writerow(
            [{"item_id": item.pk, "source": "alice-private", "text": "Bob's own text."}.get(n, "") for n in header])
        files["data/rationales.csv"] = (text + buffer.getvalue()).encode()

    response = _upload(bob, _bundle_with(lab["bobs"], add), "bob-rows")

    assert response.status_code == 201, response.content.decode()
    mine = RationaleSource.objects.get(name="alice-private (bob-rows)")
    copy = Study.objects.get(pk=response.json()["id"])
    new_item = copy.items.get(external_id=item.external_id)
    assert mine.rationales.get(item=new_item).text == "Bob's own text."
    assert private.rationales.filter(text="Bob's own text.").count() == 0


def test_a_bundle_may_not_point_a_new_source_at_another_researchers_checkpoint(lab, tmp_path):
    """A source's model path is a way into the checkpoint it names: a bundle's new source may not
    name the folder of a source the importer may not read (model_paths.source_model_path_problem,
    the rule the admin and the LM jobs follow)."""
    checkpoint = tmp_path / "alice-private-ckpt"
    checkpoint.mkdir()
    lab["private"].model_name_or_path = str(checkpoint)
    lab["private"].save(update_fields=["model_name_or_path"])
    spec = {"name": "bobs-own", "kind": "lm", "backend": "seq2seq"}
    refused = _upload(lab["bob"], _with_sources(lab["bobs"], {**spec, "model_name_or_path": str(checkpoint)}),
                      "bob-pointed")
    assert refused.status_code == 400, refused.content.decode()
    assert "sources.model_name_or_path" in refused.content.decode() and "bobs-own" in refused.content.decode()
    assert not RationaleSource.objects.filter(name="bobs-own").exists()
    assert not Study.objects.filter(name="bob-pointed").exists()
    made = _upload(lab["bob"], _with_sources(lab["bobs"], {**spec, "model_name_or_path": str(tmp_path / "bobs")}),
                   "bob-own-path")
    assert made.status_code == 201, made.content.decode()
