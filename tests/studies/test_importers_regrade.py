"""A corrected answer re-grades what was graded against it: an item re-import that changes a gold
answer sets ``prediction_correct`` of the item's rationales again (so task accuracy and
U(utility | task accuracy) read the corrected gold), and a generalization re-import that changes a
question's answer sets ``correct`` of its Gen-U predictions again, each in the import's transaction
and counted in its record (``studies.services.grading``)."""
from __future__ import annotations

import pytest

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring.services import study_score
from studies.models import Dataset, GenUPrediction, Item, Rationale, RationaleSource
from studies.services import generation
from studies.services.importers import (
    ImportValidationError,
    generalization_questions_import,
    items_import_table,
    rationales_import,
)
from studies.services.studies import study_create
from tests.studies.helpers import write_json, write_jsonl
from tests.studies.lm.openai_server import OpenAIServer, completion
from tests.work import work

pytestmark = pytest.mark.django_db

ITEMS = "id,question,answer,split\nq1,Is ice cold?,yes,test\nq2,Is snow white?,{q2},test\n"


def _items_with_lm2_rationales(tmp_path, *, q2_gold: str):
    """Items q1 (gold yes) and q2 (gold ``q2_gold``) imported from a file, and the rationales of the
    source lm2, which predicts "yes" for both (q3 has a rationale without a prediction)."""
    items = tmp_path / "items.csv"
    items.write_text(ITEMS.format(q2=q2_gold) + "q3,Is fire hot?,yes,train\n")
    items_import_table(file=items, dataset_name="Gold", task_format="yes_no")
    rationales = tmp_path / "lm2.csv"
    rationales.write_text("item_id,source,rationale,predicted_answer\n"
                          "q1,lm2,Ice is frozen.,yes\nq2,lm2,Snow is white.,yes\nq3,lm2,Fire burns.,\n")
    rationales_import(file=rationales, dataset_name="Gold")
    return items


def _correct() -> dict[str, bool | None]:
    return dict(Rationale.objects.filter(source__name="lm2").values_list("item__external_id", "prediction_correct"))


def test_a_corrected_gold_answer_regrades_the_rationales_and_task_accuracy(tmp_path):
    items = _items_with_lm2_rationales(tmp_path, q2_gold="no")
    assert _correct() == {"q1": True, "q2": False, "q3": None}

    items.write_text(ITEMS.format(q2="yes") + "q3,Is fire hot?,no,train\n")  # q2 corrected; q3 has no prediction
    record = items_import_table(file=items, dataset_name="Gold")

    assert Item.objects.get(external_id="q2").gold_answer == "yes"
    assert _correct() == {"q1": True, "q2": True, "q3": None}
    assert (record.updated, record.summary["gold_answers_changed"]) == (2, 2)
    assert "rationales_regraded" not in record.summary  # other sources' rationales: not the reader's to count
    study = study_create(name="corrected", dataset=Dataset.objects.get(name="Gold"), split="test",
                         sources=[RationaleSource.objects.get(name="lm2")], annotators_per_unit=1, units_per_task=2,
                         consent_text="I agree.")
    study = study_open(study=study, user=OPERATOR)
    work(study, "5a9d64f5f6dfdd0001eaa73d")
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    assert run.results["task_accuracy"]["lm2"] == 1.0

    again = items_import_table(file=items, dataset_name="Gold")  # nothing changes: nothing is regraded
    assert (again.updated, again.summary["gold_answers_changed"]) == (0, 0)


def test_a_refused_gold_correction_regrades_nothing(tmp_path):
    """All or nothing: a file correcting q2's gold and q3's, which the open study of the train split
    fixes, is refused whole: q2's gold and its rationale's grade stay as they were."""
    items = _items_with_lm2_rationales(tmp_path, q2_gold="no")
    study = study_create(name="fixed", dataset=Dataset.objects.get(name="Gold"), split="train",
                         sources=[RationaleSource.objects.get(name="lm2")], annotators_per_unit=1, units_per_task=1,
                         consent_text="I agree.")
    study_open(study=study, user=OPERATOR)
    items.write_text("id,question,answer,split\nq2,Is snow white?,yes,test\nq3,Is fire hot?,no,train\n")

    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=items, dataset_name="Gold")

    assert [(e.line, e.field) for e in exc.value.errors] == [(3, "gold_answer")]
    assert dict(Item.objects.values_list("external_id", "gold_answer")) == {"q1": "yes", "q2": "no", "q3": "yes"}
    assert _correct() == {"q1": True, "q2": False, "q3": None}


def test_a_corrected_question_answer_regrades_its_genu_predictions(tmp_path):
    items = tmp_path / "items.csv"
    items.write_text("id,question,answer,split\nq1,Is ice cold?,yes,dev\n")
    items_import_table(file=items, dataset_name="GenU", task_format="yes_no")
    rationales = tmp_path / "lm2.csv"
    rationales.write_text("item_id,source,rationale,predicted_answer\nq1,lm2,Ice is frozen.,yes\n")
    rationales_import(file=rationales, dataset_name="GenU")
    questions = write_json(tmp_path / "generalisation_final_dev.json",
                           {"Is ice cold?": [["Is frozen water cold?", "True", "rephrase"]]})
    generalization_questions_import(file=questions, dataset_name="GenU", validation_status="valid")
    source = RationaleSource.objects.get(name="lm2")
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerers = {role: RationaleSource.objects.create(
            name=f"answerer-{role}", kind="lm", backend="openai", model_name_or_path="some/ckpt",
            endpoint_url=server.url, decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")}
        job = generation.generation_job_run(job_id=generation.generation_job_create(
            kind="genu_answers", source=source, item_ids=list(Item.objects.values_list("pk", flat=True)), user=None,
            enqueue=False, params={"answerer_i": answerers["I"].pk, "answerer_ir": answerers["IR"].pk}).pk)
    assert job.status == "done", job.error
    predictions = GenUPrediction.objects.filter(rationale_source=source)
    assert sorted(predictions.values_list("answerer", "predicted_answer", "correct")) == [
        ("I", "yes", True), ("IR", "yes", True)]

    write_json(questions, {"Is ice cold?": [["Is frozen water cold?", "False", "rephrase"]]})
    record = generalization_questions_import(file=questions, dataset_name="GenU")

    assert sorted(predictions.values_list("answerer", "predicted_answer", "correct")) == [
        ("I", "yes", False), ("IR", "yes", False)]
    assert (record.updated, record.summary["answers_changed"]) == (1, 1)
    assert "genu_predictions_regraded" not in record.summary


def test_an_admin_edit_of_the_gold_answer_or_a_prediction_grades_again(tmp_path):
    """The admin's edits (``content_row_save``) are the other way a gold answer or a prediction
    changes: the flag stayed as graded against the old answer."""
    from studies.services.content import content_row_save

    _items_with_lm2_rationales(tmp_path, q2_gold="no")
    q2 = Item.objects.get(external_id="q2")
    q2.gold_answer = "yes"
    content_row_save(user=None, obj=q2, changed={"gold_answer"})
    assert _correct() == {"q1": True, "q2": True, "q3": None}

    rationale = Rationale.objects.get(source__name="lm2", item__external_id="q1")
    rationale.predicted_answer = "no"
    content_row_save(user=None, obj=rationale, changed={"predicted_answer"})
    assert _correct() == {"q1": False, "q2": True, "q3": None}


def _admin_post(client, rationale: Rationale, **changes):
    """The admin's change form of ``rationale`` posted with ``changes`` (what a researcher types)."""
    import json

    from django.urls import reverse

    data = {"item": rationale.item_id, "source": rationale.source_id, "text": rationale.text,
            "predicted_answer": rationale.predicted_answer, "highlights": json.dumps(rationale.highlights),
            "faithfulness": json.dumps(rationale.faithfulness), "raw_output": rationale.raw_output,
            "generation_info": json.dumps(rationale.generation_info), **changes}
    return client.post(reverse("admin:studies_rationale_change", args=[rationale.pk]), data, follow=True)


def test_the_admin_shows_prediction_correct_but_does_not_take_it(admin_client, tmp_path):
    """``prediction_correct`` is derived (``grading.prediction_correct``): the admin shows it read-only,
    and a flag posted by hand is not stored, so task accuracy reads the graded one."""
    _items_with_lm2_rationales(tmp_path, q2_gold="no")
    rationale = Rationale.objects.get(source__name="lm2", item__external_id="q1")
    from django.urls import reverse

    page = admin_client.get(reverse("admin:studies_rationale_change", args=[rationale.pk]))
    assert 'name="prediction_correct"' not in page.content.decode()
    assert "Prediction correct" in page.content.decode()

    response = _admin_post(admin_client, rationale, prediction_correct="false", text="Ice is frozen water.")
    assert response.status_code == 200
    rationale.refresh_from_db()
    assert (rationale.text, rationale.prediction_correct) == ("Ice is frozen water.", True)
    assert _correct() == {"q1": True, "q2": False, "q3": None}


def test_the_admin_refuses_a_predicted_answer_that_is_no_choice_label(admin_client, tmp_path):
    """A predicted answer must be one of its item's dataset's choice labels, exactly (what it is
    graded by) or blank: "Yes" for the label "yes" is refused with the field and the labels named, not
    stored and graded wrong."""
    _items_with_lm2_rationales(tmp_path, q2_gold="no")
    rationale = Rationale.objects.get(source__name="lm2", item__external_id="q2")

    response = _admin_post(admin_client, rationale, predicted_answer="Yes")
    html = response.content.decode()
    assert "predicted_answer" in html and "(yes, no)" in html and "write &#x27;yes&#x27;" in html
    rationale.refresh_from_db()
    assert (rationale.predicted_answer, rationale.prediction_correct) == ("yes", False)

    _admin_post(admin_client, rationale, predicted_answer="no")
    _admin_post(admin_client, Rationale.objects.get(source__name="lm2", item__external_id="q1"), predicted_answer="")
    assert _correct() == {"q1": None, "q2": True, "q3": None}


def test_content_row_save_refuses_a_predicted_answer_not_of_the_datasets_labels(tmp_path):
    """The rule is the dataset's labels (``choices.predicted_answer_problem``), the one the rationale
    import reads a file's predicted answers by: a multiple-choice item's rationale takes "b", not "(B)"
    nor "d"; a new rationale is checked as an edit is."""
    from studies.services.content import ContentChangeRefused, content_row_save

    rows = [{"id": "m1", "question": "Pick the gas", "choices": ["stone", "air", "sand"], "answer": "B"}]
    items_import_table(file=write_jsonl(tmp_path / "mc.jsonl", rows), dataset_name="MC",
                       task_format="multiple_choice", choice_labels=["a", "b", "c"])
    item = Item.objects.get(external_id="m1")
    source = content_row_save(user=None, obj=RationaleSource(name="hand", kind=RationaleSource.Kind.IMPORTED),
                              changed=())
    with pytest.raises(ContentChangeRefused) as refused:
        content_row_save(user=None, obj=Rationale(item=item, source=source, text="Air is a gas.",
                                                  predicted_answer="(B)"), changed=())
    assert str(refused.value) == ("a new rationale of item 'm1': predicted_answer '(B)' is not one of the choice "
                                  "labels of dataset 'MC' (a, b, c) (write 'b'); leave it blank for no prediction")
    assert not Rationale.objects.exists()

    rationale = content_row_save(user=None, obj=Rationale(item=item, source=source, text="Air is a gas.",
                                                          predicted_answer="b"), changed=())
    assert Rationale.objects.get(pk=rationale.pk).prediction_correct is True
    rationale.predicted_answer = "d"
    with pytest.raises(ContentChangeRefused, match=r"predicted_answer 'd' is not one of .* \(a, b, c\);"):
        content_row_save(user=None, obj=rationale, changed={"predicted_answer"})
    assert Rationale.objects.get(pk=rationale.pk).predicted_answer == "b"
