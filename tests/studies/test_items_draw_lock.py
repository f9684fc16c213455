"""Drawing a study's items again (``studies.services.studies.study_items_draw``, the admin's "Draw
the item sample again") reads the study's status from its row, locked, not from the copy it is
given: a copy read before the study was opened (as the admin action's queryset read it) does not
change an open study's items."""
from __future__ import annotations

import pytest

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import Item, RationaleSource, Study
from studies.services.importers import items_import_table, rationales_import
from studies.services.studies import StudyError, study_create, study_sample_items
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def _items(tmp_path, name: str, ids: list[str]) -> None:
    items_import_table(file=write_jsonl(tmp_path / name, [
        {"id": i, "question": f"Shared question {i}?", "answer": "yes"} for i in ids]),
        dataset_name="shared-ds", task_format="yes_no", user=None)


def test_a_stale_draft_copy_does_not_draw_an_open_studys_items_again(tmp_path):
    bob, _ = researcher_without_reference_views("bob")
    _items(tmp_path, "items_test.jsonl", ["q0", "q1", "q2"])
    rationales_import(file=write_jsonl(tmp_path / "bob.jsonl", [
        {"item_id": f"q{i}", "source": "bob-src", "rationale": f"Bob's {i}."} for i in range(3)]),
        dataset_name="shared-ds", user=None)
    study = study_create(name="bobs-study", dataset=Item.objects.get(external_id="q0").dataset,
                         sources=[RationaleSource.objects.get(name="bob-src")], owner=bob, consent_text="I agree.")
    stale = Study.objects.get(pk=study.pk)  # what the admin action's queryset read, before the open committed
    assert stale.status == Study.Status.DRAFT
    study_open(study=study, user=OPERATOR)
    before = set(study.items.values_list("external_id", flat=True))
    _items(tmp_path, "more_test.jsonl", ["q7"])

    with pytest.raises(StudyError, match="is open: only a draft can be re-sampled"):
        study_sample_items(study=stale, user=bob)
    assert set(Study.objects.get(pk=study.pk).items.values_list("external_id", flat=True)) == before


def test_a_draft_is_still_drawn_again(tmp_path):
    bob, _ = researcher_without_reference_views("bob")
    _items(tmp_path, "items_test.jsonl", ["q0", "q1"])
    rationales_import(file=write_jsonl(tmp_path / "bob.jsonl", [
        {"item_id": f"q{i}", "source": "bob-src", "rationale": f"Bob's {i}."} for i in range(2)]),
        dataset_name="shared-ds", user=None)
    study = study_create(name="bobs-study", dataset=Item.objects.get(external_id="q0").dataset,
                         sources=[RationaleSource.objects.get(name="bob-src")], owner=bob, consent_text="I agree.")
    _items(tmp_path, "more_test.jsonl", ["q7"])
    drawn = study_sample_items(study=study, user=bob)
    assert [i.external_id for i in drawn] == ["q0", "q1", "q7"]
    assert set(study.items.values_list("external_id", flat=True)) == {"q0", "q1", "q7"}
