"""A researcher's rows under her own dataset's items stay hers whoever's study draws the items, and a
re-import may not re-mark a generalization question its importer may not change.

1. Olga (no reference-view permissions) owns a draft study on her dataset, listing her source; her
   rationale of a train item is in no study. Xavier (``studies.view_dataset``) draws that split into
   his own draft study. Before: Olga's edit and deletion of her rationale were refused as "not yours
   (item: there is no such item you may use)", the stored-row rule asking whether she may *read* the
   item (``items_for_jobs`` leaves out an item a study she cannot read shows), and her re-import of a
   rationale the same import had just created was refused as "used by a study you may not change".
   Now a stored row's item is judged by its dataset (``content.STORED_PARENT_SELECTORS``,
   ``selectors.items_of_datasets_to_build_on``), as an import finds its items; a view share's reader is
   still refused, and a parent refusal in an import says so (``upsert.refuse_changes_not_allowed``).
2. Before: a re-import with another ``validation_status`` re-marked questions for a user without
   ``studies.change_generalizationquestion``, which the service refuses. Now the whole file is refused,
   by row and field (``questions.validation_change_problem``, the rule both ask)."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from studies.models import GeneralizationQuestion, ImportRecord, Item, Rationale, RationaleSource, StudyShare
from studies.services.content import ContentNotYours, content_row_save, content_rows_delete
from studies.services.importers import (
    ImportValidationError,
    generalization_questions_import,
    rationales_import,
)
from studies.services.importers.upsert import bulk_upsert
from studies.services.questions import (
    CHANGE_PERMISSION,
    QuestionError,
    generalization_questions_set_validation,
)
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import ItemFactory
from tests.studies.helpers import write_json, write_jsonl

pytestmark = pytest.mark.django_db

VALID, INVALID = GeneralizationQuestion.Validation.VALID, GeneralizationQuestion.Validation.INVALID


def _with(user, *codenames):
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="studies", codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)


def _without(user, *codenames):
    user.user_permissions.remove(*Permission.objects.filter(content_type__app_label="studies", codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)


def _import_rationale(tmp_path, olga, study, item, text):
    path = write_jsonl(tmp_path / "olgas_rationales.jsonl",
                       [{"question": item.question, "rationale_source": study.sources.get().name, "rationale": text}])
    return rationales_import(file=path, dataset_name=study.dataset.name, split="train", user=olga)


@pytest.fixture
def drawn(tmp_path):
    """Olga's draft study on her dataset with her source; train items t0 and t1; her rationale of
    t0 imported by her. Then Xavier draws the train split into his own draft study."""
    olga, _ = researcher_without_reference_views("olga")
    study = make_study(status="draft", n_items=2, n_sources=1, n_genq=0, owner=olga, name="olgas-study")
    t0 = ItemFactory(dataset=study.dataset, split="train", external_id="t0", question="Olga's train item zero?")
    t1 = ItemFactory(dataset=study.dataset, split="train", external_id="t1", question="Olga's train item one?")
    _import_rationale(tmp_path, olga, study, t0, "Olga's rationale of t0.")
    rationale = Rationale.objects.get(item=t0, source=study.sources.get())
    xavier, _ = researcher_without_reference_views("xavier")
    xavier = _with(xavier, "view_dataset")
    xsource = make_study(status="draft", n_items=1, n_sources=1, n_genq=0, owner=xavier).sources.get()
    xstudy = study_create(name="xaviers-study", dataset=study.dataset, split="train", sources=[xsource],
                          owner=xavier, user=xavier, consent_text="ok")
    assert set(xstudy.items.values_list("pk", flat=True)) == {t0.pk, t1.pk}
    return olga, study, t0, t1, rationale, xavier


def test_the_owner_edits_and_deletes_her_rationale_of_an_item_another_study_draws(drawn):
    olga, _, _, _, rationale, _ = drawn
    rationale.text = "Olga's rationale of t0, edited."
    content_row_save(user=olga, obj=rationale, changed={"text"})
    rationale.refresh_from_db()
    assert rationale.text == "Olga's rationale of t0, edited."
    assert content_rows_delete(user=olga, model=Rationale, pks=[rationale.pk]) == 1
    assert not Rationale.objects.filter(pk=rationale.pk).exists()


def test_the_owner_creates_and_reimports_her_rationale_of_a_drawn_item(drawn, tmp_path):
    olga, study, _, t1, _, _ = drawn
    first = _import_rationale(tmp_path, olga, study, t1, "Olga's rationale of t1.")
    assert first.created == 1
    again = _import_rationale(tmp_path, olga, study, t1, "Olga's rationale of t1, rewritten.")
    assert (again.created, again.updated) == (0, 1)
    assert Rationale.objects.get(item=t1, source=study.sources.get()).text == "Olga's rationale of t1, rewritten."


def test_others_are_still_refused_with_a_true_answer(drawn):
    olga, study, _, _, rationale, xavier = drawn
    # Xavier draws the item but Olga's source is not his to build on.
    with pytest.raises(ContentNotYours) as refused:
        content_rows_delete(user=xavier, model=Rationale, pks=[rationale.pk])
    assert "source: there is no such rationale source you may use" in str(refused.value)
    # A view share's reader of Olga's study may not rewrite her rows, and an import says why truly.
    bob, _ = researcher_without_reference_views("bob")
    study_share(study=study, user=olga, with_user=bob, level=StudyShare.Level.VIEW)
    with pytest.raises(ContentNotYours) as refused:
        content_rows_delete(user=bob, model=Rationale, pks=[rationale.pk])
    assert "item: there is no such item you may use" in str(refused.value)
    key = (rationale.item_id, rationale.source_id)
    with pytest.raises(ImportValidationError) as refused:
        bulk_upsert(model=Rationale, existing={key: rationale}, rows={key: {"text": "Rewritten by bob."}},
                    build=lambda key, values: Rationale(item_id=key[0], source_id=key[1], **values),
                    compare_fields=["text"], lines={key: 2}, user=bob, key_field="item")
    (error,) = refused.value.errors
    assert (error.line, error.field) == (2, "item")
    assert "hangs from a parent you may not build on" in error.reason and "used by a study" not in error.reason
    rationale.refresh_from_db()
    assert rationale.text == "Olga's rationale of t0."


# 2. A re-import that changes a question's validation status needs the permission to change it.

def _questions_file(tmp_path, item, *rows):
    return write_json(tmp_path / "generalisation_final_test.json", {item.question: list(rows)})


def test_a_reimport_may_not_re_mark_questions_without_the_change_permission(tmp_path):
    olga, _ = staff_client("olga")
    study = make_study(status="draft", n_items=1, n_sources=1, n_genq=0, owner=olga, name="olgas-study")
    item = study.items.get()
    known = ["Olga's generalization?", "True", "rephrase"]
    generalization_questions_import(file=_questions_file(tmp_path, item, known), dataset_name=study.dataset.name,
                                    validation_status=VALID, user=olga)
    question = GeneralizationQuestion.objects.get(text="Olga's generalization?")
    olga = _without(olga, "change_generalizationquestion")
    with pytest.raises(QuestionError):
        generalization_questions_set_validation(user=olga, questions=[question], status=INVALID)
    records = ImportRecord.objects.count()

    path = _questions_file(tmp_path, item, ["A new one?", "False", "similar"], known)
    with pytest.raises(ImportValidationError) as refused:
        generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=INVALID,
                                        user=olga)
    (error,) = refused.value.errors
    assert error.line is not None and error.field == "validation_status"
    assert "Olga's generalization?" in error.record and CHANGE_PERMISSION in error.reason
    question.refresh_from_db()
    assert question.validation_status == VALID and question.metadata["validation"]["set_by"] == "import"
    assert not GeneralizationQuestion.objects.filter(text="A new one?").exists()  # all or nothing
    assert ImportRecord.objects.count() == records

    # The same status, or a file of new questions only, still imports; the operator still re-marks.
    kept = generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=VALID,
                                           user=olga)
    assert (kept.created, kept.updated) == (1, 0)
    generalization_questions_import(file=path, dataset_name=study.dataset.name, validation_status=INVALID)
    question.refresh_from_db()
    assert question.validation_status == INVALID
    assert Item.objects.filter(pk=item.pk).exists() and RationaleSource.objects.exists()
