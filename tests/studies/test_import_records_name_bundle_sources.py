"""A study bundle import's record is read by whoever may see the study it made, and it names the
sources it had to make under a new name (``renamed["sources"]``: the bundle's name, and the name
here). Gen-U's answerer sources are not the study's sources, so a reader of the study may not read
them (the bundle export withholds their names: ``scoring.services.bundle.export.answerer_sources_json``);
the record is then read beyond its importer only by whoever may also read every source it names
(``import_records_for_user``, by the ids the import stores in ``summary["source_ids"]``).

Bob imports a bundle (``tests.scoring.test_import_hidden_reference_data``'s lab) whose answerer's
name is held by Alice's private source, so his answerer is made as "alice-private (bob-answerers)";
he shares the new study with Carol, who reads only what her studies use."""
from __future__ import annotations

import pytest

from studies.models import ImportRecord, RationaleSource, Study
from studies.selectors import import_records_for_user, sources_for_user
from studies.services.sharing import study_share
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.scoring.test_import_hidden_reference_data import _upload, _with_sources, api, lab  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

ANSWERER = {"name": "alice-private", "kind": "lm", "backend": "openai", "model_name_or_path": "bundle-ft",
            "training": {"preset": "bundle"}}
SOURCE = {"name": "alice-private", "kind": "lm", "backend": "openai", "model_name_or_path": "alice-model",
          "template": "guess {question}"}


@pytest.fixture
def carol():
    return researcher_without_reference_views("carol")[0]


def _import_shared_with(carol, setup: dict, name: str, **sources) -> ImportRecord:
    """Bob's bundle of his study with ``sources`` added, imported as ``name`` and shared with Carol."""
    bob = setup["bob"]
    response = _upload(bob, _with_sources(setup["bobs"], *sources.get("study", ()),
                                          answerers=sources.get("answerers", ())), name)
    assert response.status_code == 201, response.content.decode()
    study = Study.objects.get(pk=response.json()["id"])
    study_share(study=study, user=bob, with_user=carol)
    return ImportRecord.objects.get(kind="bundle", summary__study=study.pk)


def _api_lists(user, record: ImportRecord) -> bool:
    response = api(user).get("/api/v1/imports/")
    assert response.status_code == 200
    return record.pk in {row["id"] for row in response.json()["results"]}


def test_a_reader_of_the_study_does_not_read_a_bundle_record_naming_an_answerer_hidden_from_them(lab, carol):  # noqa: F811 (the fixture imported above)
    record = _import_shared_with(carol, lab, "bob-answerers", answerers=(ANSWERER,))
    answerer = RationaleSource.objects.get(name="alice-private (bob-answerers)")
    assert record.summary["renamed"] == {"sources": {"alice-private": answerer.name}}
    assert record.summary["source_ids"] == [answerer.pk]
    assert not sources_for_user(user=carol).filter(pk=answerer.pk).exists()

    assert record not in import_records_for_user(user=carol)
    assert not _api_lists(carol, record) and "alice-private" not in api(carol).get("/api/v1/imports/").content.decode()
    assert record in import_records_for_user(user=lab["bob"])


def test_a_bundle_record_naming_only_the_studys_sources_is_read_with_the_study(lab, carol):  # noqa: F811 (the fixture imported above)
    """A renamed source the study lists is the reader's to read, and so is the record."""
    record = _import_shared_with(carol, lab, "bob-right", study=(SOURCE,))
    mine = RationaleSource.objects.get(name="alice-private (bob-right)")
    assert record.summary["source_ids"] == [mine.pk]

    assert record in import_records_for_user(user=carol)
    assert _api_lists(carol, record)


def test_a_bundle_record_naming_no_source_is_read_with_the_study(lab, carol):  # noqa: F811 (the fixture imported above)
    record = _import_shared_with(carol, lab, "bob-plain")
    assert "sources" not in record.summary["renamed"] and record.summary["source_ids"] == []

    assert record in import_records_for_user(user=carol)


def test_a_bundle_record_from_before_source_ids_is_read_with_the_study_unless_it_renamed_a_source(lab, carol):  # noqa: F811 (the fixture imported above)
    """Records imported before the bundle import stored ``source_ids`` (the key is dropped here, as
    no import writes such a record any more): one that renamed no source names none and is read with
    its study; one that did is read beyond its importer only by whoever reads every source."""
    plain = _import_shared_with(carol, lab, "bob-plain")
    hidden = _import_shared_with(carol, lab, "bob-answerers", answerers=(ANSWERER,))
    for record in (plain, hidden):
        record.summary.pop("source_ids")
        record.save(update_fields=["summary"])

    readable = set(import_records_for_user(user=carol))
    assert plain in readable and hidden not in readable
