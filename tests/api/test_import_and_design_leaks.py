"""What the API tells one researcher about another's datasets, rationales and accounts: nothing.
``POST /api/v1/imports/`` answers a hidden dataset as an unknown one and suggests only datasets the
user may see; a rationale row refused because another researcher's study uses it says neither which
fields differ from the stored row nor its id; the browsable API's study form lists no usernames
(``shared_with`` takes usernames as text, resolved as the study page's shares are)."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studies.models import ImportRecord, Item, Rationale, Study, StudyShare
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory
from tests.studies.helpers import IMPORT, olgas_lab, researcher

pytestmark = pytest.mark.django_db

SECRET = "ALICE-SECRET-RATIONALE"


@pytest.fixture
def lab():
    """Alice's study lists her source on "shared-ds", where Bob (who reads only what his studies
    use) has a study of his own; Alice's other study is on "alice-hidden-ds"."""
    alice, _ = staff_client("alice")
    bob, _ = researcher_without_reference_views("bob")
    shared = DatasetFactory(name="shared-ds")
    item = ItemFactory(dataset=shared, split="test", external_id="q0", gold_answer="yes")
    alices_source, bobs_source = RationaleSourceFactory(name="alice-src"), RationaleSourceFactory(name="bob-src")
    secret = RationaleFactory(item=item, source=alices_source, text=SECRET)
    RationaleFactory(item=item, source=bobs_source)
    study_create(name="alices-study", dataset=shared, sources=[alices_source], owner=alice, user=alice)
    study_create(name="bobs-study", dataset=shared, sources=[bobs_source], owner=bob)  # by the operator
    hidden = DatasetFactory(name="alice-hidden-ds")
    ItemFactory(dataset=hidden, split="test", external_id="h0", gold_answer="yes")
    study_create(name="alices-hidden-study", dataset=hidden, sources=[alices_source], owner=alice, user=alice)
    return {"alice": alice, "bob": bob, "secret": secret}


def _import(client, dataset: str, body: bytes):
    upload = SimpleUploadedFile("r.csv", body, content_type="text/csv")
    return client.post("/api/v1/imports/", {"kind": "rationales", "dataset": dataset, "file": upload},
                       format="multipart")


def test_an_import_answers_a_hidden_dataset_as_an_unknown_one(client_for, lab):
    client = client_for(lab["bob"])
    body = b"item_id,source,rationale\nh0,bob-src,Mine.\n"

    said = {}
    for name in ("alice-hidden-ds", "nope"):
        response = _import(client, name, body)
        assert response.status_code == 400
        said[name] = response.content.decode().replace(name, "NAME")

    assert said["alice-hidden-ds"] == said["nope"]
    assert "alice-hidden-ds" not in said["nope"] and "(known: shared-ds)" in said["nope"]
    assert not Rationale.objects.filter(item__external_id="h0").exists()



def test_an_item_import_naming_a_hidden_dataset_is_refused_as_a_taken_name(client_for, lab):
    # Names are unique: a hidden dataset's name cannot be created as a missing one would be. The
    # answer says only that it is taken; the file's items are not added to Alice's dataset.
    upload = SimpleUploadedFile("planted_test.json", json.dumps([
        {"qid": "h0", "question": "Overwritten?", "answer": False},
        {"qid": "x1", "question": "Planted?", "answer": True}]).encode(), content_type="application/json")
    response = client_for(lab["bob"]).post("/api/v1/imports/", {
        "kind": "strategyqa", "dataset": "alice-hidden-ds", "file": upload}, format="multipart")

    assert response.status_code == 400, response.content
    assert "the dataset name 'alice-hidden-ds' is taken by a dataset you may not see" in response.json()["file"][0]
    assert list(Item.objects.filter(dataset__name="alice-hidden-ds").values_list("external_id", flat=True)) == ["h0"]
    assert not ImportRecord.objects.exists()

def test_a_refused_rationale_row_does_not_tell_anothers_text_field_by_field(client_for, lab):
    client = client_for(lab["bob"])
    answers = []
    for guess in (SECRET, "a wrong guess"):
        response = _import(client, "shared-ds", f"item_id,source,rationale\nq0,alice-src,{guess}\n".encode())
        assert response.status_code == 400
        (error,) = response.json()["errors"]
        answers.append(error)

    assert answers[0] == answers[1]  # a right guess reads as a wrong one
    error = answers[0]
    assert error["line"] == 2 and error["field"] == "source" and "is taken by a source you may not see" in error["reason"]
    assert str(lab["secret"].pk) not in error["reason"] and "text" not in error["reason"]
    assert Rationale.objects.get(pk=lab["secret"].pk).text == SECRET


def test_the_browsable_study_form_lists_no_usernames(client_for, make_user, lab):
    make_user("zebulon-elsewhere", perms=["studies.add_study"])  # an account Bob has no business knowing of
    viewer = Client()
    viewer.force_login(lab["bob"])

    page = viewer.get("/api/v1/studies/", HTTP_ACCEPT="text/html")

    assert page.status_code == 200
    html = page.content.decode()
    assert "shared_with" in html  # the field is still offered, as text
    assert "zebulon-elsewhere" not in html and "alice" not in html

    # Posted through the API, usernames still share the study; an unknown one is refused as before.
    design = {"name": "bobs-shared", "dataset": "shared-ds", "sources": ["bob-src"], "consent_text": "ok",
              "shared_with": ["zebulon-elsewhere"], "share_level": "change"}
    created = client_for(lab["bob"]).post("/api/v1/studies/", design, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["shared_with"] == ["zebulon-elsewhere"]
    share = StudyShare.objects.get(study=Study.objects.get(name="bobs-shared"))
    assert (share.user.username, share.level) == ("zebulon-elsewhere", "change")
    refused = client_for(lab["bob"]).post("/api/v1/studies/", {**design, "name": "again", "shared_with": [7]},
                                          format="json")
    assert refused.status_code == 400 and refused.json()["shared_with"] == ["'7': not found or not yours."]


def _upload(client, kind: str, dataset: str, body: str):
    upload = SimpleUploadedFile(f"{kind}.csv", body.encode(), content_type="text/csv")
    return client.post("/api/v1/imports/", {"kind": kind, "dataset": dataset, "file_format": "csv", "file": upload},
                       format="multipart")


REX_ITEMS = "id,question,answer,split\ntrain-0,Changed by rex?,no,train\nplanted-1,Planted by rex?,yes,train\n"


def test_a_view_share_reader_imports_nothing_into_the_owners_dataset(client_for):
    # A view share reads the study: its reader may not rewrite the owner's unshown items, plant new
    # ones or replace the owner's rationales, and the refusal is the one a dataset he may not see gets.
    olgas = olgas_lab()
    rex = researcher("rex", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=rex, level=StudyShare.Level.VIEW)
    DatasetFactory(name="olgas-unshared-ds")  # in no study: rex may not see it at all
    client = client_for(rex)
    rationale = f"item_id,source,rationale\ntrain-0,{olgas.source.name},Rex's text.\n"

    said = {}
    for name in (olgas.dataset.name, "olgas-unshared-ds"):
        items = _upload(client, "items", name, REX_ITEMS)
        rationales = _upload(client, "rationales", name, rationale)
        assert (items.status_code, rationales.status_code) == (400, 400), (items.content, rationales.content)
        said[name] = (items.content.decode().replace(name, "NAME"), rationales.content.decode().replace(name, "NAME"))

    assert said[olgas.dataset.name] == said["olgas-unshared-ds"]
    olgas.train.refresh_from_db()
    olgas.rationale.refresh_from_db()
    assert (olgas.train.question, olgas.train.gold_answer) == ("Olga's train question?", "yes")
    assert olgas.rationale.text == "Olga's train rationale."
    assert not Item.objects.filter(external_id="planted-1").exists()
    assert not ImportRecord.objects.exists()  # no counts of created / updated / unchanged to read

    # A change share, and the owner, import as before.
    cora = researcher("cora", "studies.change_study", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=cora, level=StudyShare.Level.CHANGE)
    items = _upload(client_for(cora), "items", olgas.dataset.name, REX_ITEMS)
    assert items.status_code == 201, items.content
    assert (items.json()["created"], items.json()["updated"]) == (1, 1)
    rationales = _upload(client_for(olgas.olga), "rationales", olgas.dataset.name,
                         rationale.replace("Rex's text.", "Olga's new text."))
    assert rationales.status_code == 201, rationales.content
    assert Rationale.objects.get(pk=olgas.rationale.pk).text == "Olga's new text."
