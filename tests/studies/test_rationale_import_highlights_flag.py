"""A rationales import that carries highlights marks its source as having them
(``RationaleSource.has_highlights``: scoring then computes the source's faithfulness, and a
faithfulness job may start on it). That is a change to the source, so it is asked of the content
rule as the admin's change page asks it: a source another researcher's study uses is not the
importer's to mark, and the import is refused by line and writes nothing, wherever it comes from
(the API here; the admin's import page, background jobs and the command run the same service)."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.api.tokens import api_token_create
from studies.models import Item, Rationale, RationaleSource
from studies.selectors import CHANGE, sources_for_user, studies_for_user
from studies.services.importers import items_import_table, rationales_import
from studies.services.studies import study_create
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def bobs_open_study(tmp_path):
    """Bob's open study over a shared dataset, using his source ``bob-src`` (no highlights); the
    dataset also has a train item ``t9`` his study did not draw. Returns (Alice's API client, the source)."""
    alice, _ = staff_client("alice")  # every model permission, no superuser
    bob, _ = researcher_without_reference_views("bob")
    items_import_table(file=write_jsonl(tmp_path / "items_test.jsonl", [
        {"id": f"q{i}", "question": f"Shared question {i}?", "answer": "yes"} for i in range(3)]),
        dataset_name="shared-ds", task_format="yes_no", user=None)
    items_import_table(file=write_jsonl(tmp_path / "items_train.jsonl", [
        {"id": "t9", "question": "A train question?", "answer": "yes"}]),
        dataset_name="shared-ds", task_format="yes_no", user=None)
    rationales_import(file=write_jsonl(tmp_path / "bob.jsonl", [
        {"item_id": f"q{i}", "source": "bob-src", "rationale": f"Bob's {i}."} for i in range(3)]),
        dataset_name="shared-ds", user=None)
    source = RationaleSource.objects.get(name="bob-src")
    study = study_create(name="bobs-study", dataset=Item.objects.get(external_id="q0").dataset, sources=[source],
                         owner=bob, consent_text="I agree.")
    study_open(study=study, user=OPERATOR)
    assert not studies_for_user(user=alice, access=CHANGE).filter(pk=study.pk).exists()
    assert sources_for_user(user=alice).filter(pk=source.pk).exists()
    _, key = api_token_create(user=alice, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client, source


def post_rationales(client, body: bytes):
    return client.post("/api/v1/imports/", {
        "kind": "rationales", "dataset": "shared-ds",
        "file": SimpleUploadedFile("r.jsonl", body, content_type="application/json")}, format="multipart")


def test_an_import_does_not_mark_highlights_on_a_source_another_researchers_open_study_uses(tmp_path):
    client, source = bobs_open_study(tmp_path)
    body = (b'{"item_id": "t9", "source": "bob-src", "rationale": "Alice on a train item.", '
            b'"highlights": [[0, 5]]}\n')

    response = post_rationales(client, body)

    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [(e["line"], e["field"]) for e in errors] == [(1, "highlights")]
    assert "is used by a study you may not change" in errors[0]["reason"]
    source.refresh_from_db()
    assert not source.has_highlights
    assert not Rationale.objects.filter(source=source, item__external_id="t9").exists()  # all or nothing


def test_the_same_row_without_highlights_is_still_added(tmp_path):
    """Adding a rationale for an item Bob's study did not draw changes nothing it shows: allowed,
    as before; only the flag is the source's."""
    client, source = bobs_open_study(tmp_path)

    response = post_rationales(client, b'{"item_id": "t9", "source": "bob-src", "rationale": "Alice on t9."}\n')

    assert response.status_code == 201, response.content
    source.refresh_from_db()
    assert not source.has_highlights
    assert Rationale.objects.filter(source=source, item__external_id="t9").exists()
