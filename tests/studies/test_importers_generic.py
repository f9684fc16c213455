import json

import pytest
from django.core.management import call_command

from studies.models import ImportRecord, Item, StudyShare
from studies.services.importers import ImportValidationError, ItemColumns, items_import_table
from studies.services.sharing import study_share
from tests.factories import DatasetFactory
from tests.studies.helpers import IMPORT, researcher, write_jsonl

pytestmark = pytest.mark.django_db


def test_csv_yes_no_with_column_mapping(tmp_path):
    path = tmp_path / "pilot_dev.csv"
    path.write_text(
        "key,text,label,why,topic\n"
        "p1,Is ice cold?,true,Ice is frozen water.,physics\n"
        'p2,"Is fire, in general, cold?",No,Fire is hot.,physics\n'
    )
    record = items_import_table(
        file=path, dataset_name="Pilot", task_format="yes_no",
        columns=ItemColumns(id="key", question="text", answer="label", rationale="why", choices="", split=""),
    )
    assert record.created == 2
    p2 = Item.objects.get(external_id="p2")
    assert (p2.question, p2.gold_answer, p2.gold_rationale, p2.split) == ("Is fire, in general, cold?", "no",
                                                                           "Fire is hot.", "dev")
    assert p2.metadata == {"topic": "physics"}
    again = items_import_table(
        file=path, dataset_name="Pilot",
        columns=ItemColumns(id="key", question="text", answer="label", rationale="why", choices="", split=""),
    )
    assert (again.created, again.updated, again.unchanged) == (0, 0, 2)


def test_jsonl_multiple_choice(tmp_path):
    rows = [
        {"id": "m1", "question": "Pick the metal", "choices": ["iron", "wood", "glass"], "answer": "A", "split": "test"},
        {"id": "m2", "question": "Pick the gas", "choices": [{"label": "a", "text": "stone"},
                                                             {"label": "b", "text": "air"},
                                                             {"label": "c", "text": "sand"}], "answer": "air"},
    ]
    record = items_import_table(file=write_jsonl(tmp_path / "mc.jsonl", rows), dataset_name="MC",
                                task_format="multiple_choice", choice_labels=["a", "b", "c"])
    assert record.created == 2
    assert Item.objects.get(external_id="m1").gold_answer == "a"
    assert Item.objects.get(external_id="m2").gold_answer == "b"
    assert Item.objects.get(external_id="m2").split == "other"


def test_bad_rows_all_reported(tmp_path):
    rows = [
        {"id": "m1", "question": "Pick", "choices": ["x", "y", "z"], "answer": "d"},
        {"id": "m2", "question": "", "choices": ["x", "y", "z"], "answer": "a"},
        {"id": "m3", "question": "Pick", "choices": [{"label": "q", "text": "x"}, {"label": "b", "text": "y"},
                                                     {"label": "c", "text": "z"}], "answer": "b"},
        {"id": "m1", "question": "Again", "choices": ["x", "y", "z"], "answer": "a"},
        {"id": "m5", "question": "Pick", "choices": ["x", "y", "z"], "answer": "a", "split": "holdout"},
    ]
    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=write_jsonl(tmp_path / "mc.jsonl", rows), dataset_name="MC",
                           task_format="multiple_choice", choice_labels=["a", "b", "c"])
    assert {(e.line, e.field) for e in exc.value.errors} == {
        (1, "answer"), (2, "question"), (3, "choices"), (4, "id"), (5, "split")}
    assert Item.objects.count() == 0


def test_missing_column_is_named(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("qid,text,label\n1,Q?,yes\n")
    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=path, dataset_name="X", task_format="yes_no")
    assert "no column(s) 'id', 'question', 'answer'" in str(exc.value)


def test_new_dataset_needs_a_task_format(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("id,question,answer\n1,Q?,yes\n")
    with pytest.raises(ImportValidationError, match="give its task format"):
        items_import_table(file=path, dataset_name="Nope")


def test_import_items_command_with_mapping(tmp_path, capsys):
    path = tmp_path / "set_test.csv"
    path.write_text("qid,text,gold\nz1,Is it?,yes\n")
    call_command("import_items", str(path), "--dataset", "Cmd", "--task-format", "yes_no", "--id-column", "qid",
                 "--question-column", "text", "--answer-column", "gold")
    assert "1 created" in capsys.readouterr().out
    assert json.loads(json.dumps(Item.objects.get(external_id="z1").choices))[0]["label"] == "yes"


# A view share reads the study; it does not let its reader write into the owner's dataset.
REX_ITEMS = "id,question,answer,split\ntrain-0,Changed by rex?,no,train\nplanted-1,Planted by rex?,yes,train\n"


def _items_refusal(path, *, dataset_name: str, user, **options) -> str:
    with pytest.raises(ImportValidationError) as refused:
        items_import_table(file=path, dataset_name=dataset_name, user=user, **options)
    return str(refused.value).replace(dataset_name, "NAME")


@pytest.mark.parametrize("task_format", [None, "yes_no"])
def test_a_view_share_reader_may_not_rewrite_or_add_to_the_owners_dataset(olgas, tmp_path, task_format):
    rex = researcher("rex", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=rex, level=StudyShare.Level.VIEW)
    DatasetFactory(name="olgas-unshared-ds")  # in no study: rex may not see it at all
    path = tmp_path / "rex.csv"
    path.write_text(REX_ITEMS)
    options = {"task_format": task_format} if task_format else {}

    said = {name: _items_refusal(path, dataset_name=name, user=rex, **options)
            for name in (olgas.dataset.name, "olgas-unshared-ds")}

    # Answered as a dataset he may not see: the same words, nothing of its items.
    assert said[olgas.dataset.name] == said["olgas-unshared-ds"]
    assert "the dataset name 'NAME' is taken by a dataset you may not see" in said[olgas.dataset.name]
    olgas.train.refresh_from_db()
    assert (olgas.train.question, olgas.train.gold_answer) == ("Olga's train question?", "yes")
    assert not Item.objects.filter(external_id="planted-1").exists()
    assert not ImportRecord.objects.exists()


def test_the_owner_and_a_change_share_holder_still_import_into_the_dataset(olgas, tmp_path):
    cora = researcher("cora", "studies.change_study", IMPORT)
    study_share(study=olgas.study, user=olgas.olga, with_user=cora, level=StudyShare.Level.CHANGE)
    path = tmp_path / "cora.csv"
    path.write_text("id,question,answer,split\ntrain-0,Changed by cora?,no,train\ncora-1,Added by cora?,yes,train\n")

    record = items_import_table(file=path, dataset_name=olgas.dataset.name, user=cora)

    assert (record.created, record.updated, record.unchanged) == (1, 1, 0)
    olgas.train.refresh_from_db()
    assert (olgas.train.question, olgas.train.gold_answer) == ("Changed by cora?", "no")
    path.write_text("id,question,answer,split\ntrain-0,Olga's train question?,yes,train\nolga-1,Olga's?,no,train\n")
    record = items_import_table(file=path, dataset_name=olgas.dataset.name, user=olgas.olga)
    assert (record.created, record.updated, record.unchanged) == (1, 1, 0)
    assert set(Item.objects.filter(dataset=olgas.dataset, split="train").values_list("external_id", flat=True)) == {
        "train-0", "cora-1", "olga-1"}
