import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studies.models import YES_NO_CHOICES, Dataset, ImportRecord, Item
from studies.services.importers import ImportValidationError, items_import_strategyqa
from tests.studies.helpers import write_json

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("split, expected", [("test", 458), ("dev", 184), ("train", 1648)])
def test_real_split_imports_every_question(strategyqa_dir, split, expected):
    path = strategyqa_dir / f"strategyqa_processed_{split}.json"
    record = items_import_strategyqa(file=path)
    assert record.created == expected
    items = Item.objects.filter(dataset__name="StrategyQA", split=split)
    assert items.count() == expected
    raw = json.loads(path.read_text())
    by_qid = {r["qid"]: r for r in raw}
    item = items.get(external_id=raw[0]["qid"])
    assert item.question == raw[0]["question"]
    assert item.gold_answer == ("yes" if raw[0]["answer"] else "no")
    assert item.gold_rationale == raw[0]["rationale"]
    assert item.choices == YES_NO_CHOICES
    assert item.metadata["facts"] == raw[0]["facts"]
    assert item.metadata["decomposition"] == raw[0]["decomposition"]
    assert item.metadata["term"] == raw[0]["term"]
    yes = sum(1 for r in by_qid.values() if r["answer"] is True)
    assert items.filter(gold_answer="yes").count() == yes
    assert Dataset.objects.get(name="StrategyQA").task_format == Dataset.TaskFormat.YES_NO


def test_reimport_changes_nothing(sqa_test_file):
    items_import_strategyqa(file=sqa_test_file)
    before = list(Item.objects.values_list("id", "updated_at").order_by("id"))
    again = items_import_strategyqa(file=sqa_test_file)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 458)
    assert list(Item.objects.values_list("id", "updated_at").order_by("id")) == before
    assert ImportRecord.objects.filter(kind="strategyqa").count() == 2


def test_changed_row_is_updated_not_duplicated(tmp_path, sqa_test_file):
    items_import_strategyqa(file=sqa_test_file)
    rows = json.loads(sqa_test_file.read_text())
    rows[3]["question"] = rows[3]["question"] + " (edited)"
    record = items_import_strategyqa(file=write_json(tmp_path / "strategyqa_processed_test.json", rows))
    assert (record.created, record.updated, record.unchanged) == (0, 1, 457)
    assert Item.objects.get(external_id=rows[3]["qid"]).question.endswith("(edited)")


def test_official_fields_with_string_answers_and_stringified_facts(tmp_path):
    rows = [
        {"qid": "q1", "term": "T", "description": "D", "question": "Is it so?", "answer": "True",
         "facts": "['First fact.', 'Second fact.']", "decomposition": ["Step one?"]},
        {"qid": "q2", "question": "Is it not?", "answer": "False", "facts": ["Only fact."]},
    ]
    record = items_import_strategyqa(file=write_json(tmp_path / "official_dev.json", rows))
    assert record.created == 2
    q1 = Item.objects.get(external_id="q1")
    assert (q1.gold_answer, q1.split, q1.gold_rationale) == ("yes", "dev", "First fact. Second fact.")
    assert q1.metadata["facts"] == ["First fact.", "Second fact."]
    assert Item.objects.get(external_id="q2").gold_answer == "no"


def test_split_argument_wins_over_file_name(tmp_path):
    rows = [{"qid": "q1", "question": "Is it so?", "answer": True, "facts": []}]
    items_import_strategyqa(file=write_json(tmp_path / "x_test.json", rows), split="dev")
    assert Item.objects.get(external_id="q1").split == "dev"


def test_broken_copy_reports_every_bad_row_and_imports_nothing(tmp_path, sqa_test_file):
    rows = json.loads(sqa_test_file.read_text())
    rows[5]["answer"] = "maybe"
    rows[10]["question"] = "   "
    rows[20]["qid"] = rows[2]["qid"]
    rows[30]["facts"] = 7
    path = tmp_path / "strategyqa_processed_test.json"
    path.write_text(json.dumps(rows, indent=1))
    with pytest.raises(ImportValidationError) as exc:
        items_import_strategyqa(file=path)
    errors = {(e.field, e.line) for e in exc.value.errors}
    lines = path.read_text().splitlines()

    def line_of(index):  # the line where record `index` opens, found independently
        qid_line = next(n for n, line in enumerate(lines, 1) if f'"qid": "{rows[index]["qid"]}"' in line
                        and (index != 20 or n > 20))
        return qid_line - 1

    assert len(exc.value.errors) == 4
    assert ("answer", line_of(5)) in errors
    assert ("question", line_of(10)) in errors
    assert ("facts", line_of(30)) in errors
    assert "qid" in {e.field for e in exc.value.errors}
    dup = next(e for e in exc.value.errors if e.field == "qid")
    assert "duplicate id" in dup.reason and f"line {line_of(2)}" in dup.reason
    assert Item.objects.count() == 0 and Dataset.objects.count() == 0 and ImportRecord.objects.count() == 0


def test_not_json_reports_line_and_column(tmp_path):
    path = tmp_path / "broken_test.json"
    path.write_text('[\n {"qid": "a", "question": "Q?", "answer": true},\n {"qid": "b" "question": "R?"}\n]')
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(path.read_text())
    with pytest.raises(ImportValidationError) as exc:
        items_import_strategyqa(file=path)
    (error,) = exc.value.errors
    assert (error.line, error.column) == (expected.value.lineno, expected.value.colno) == (3, 14)
    assert "not valid JSON" in error.reason


def test_wrong_top_level_shape(tmp_path, strategyqa_dir):
    with pytest.raises(ImportValidationError) as exc:
        items_import_strategyqa(file=strategyqa_dir / "generalisation_final_test.json")
    assert "expected a JSON list" in str(exc.value)
    assert "generalization import" in str(exc.value)


def test_dataset_of_other_format_is_refused(tmp_path):
    Dataset.objects.create(name="StrategyQA", task_format=Dataset.TaskFormat.MULTIPLE_CHOICE, choice_labels=["a"])
    rows = [{"qid": "q1", "question": "Is it so?", "answer": True}]
    with pytest.raises(ImportValidationError, match="task format"):
        items_import_strategyqa(file=write_json(tmp_path / "t.json", rows))


def test_command_prints_summary(sqa_test_file, capsys):
    call_command("import_strategyqa", str(sqa_test_file))
    out = capsys.readouterr().out
    assert "458 created, 0 updated, 0 unchanged" in out


def test_command_lists_every_error(tmp_path):
    rows = [{"qid": "q1", "question": "", "answer": True}, {"qid": "q2", "question": "Q?", "answer": "perhaps"}]
    with pytest.raises(CommandError) as exc:
        call_command("import_strategyqa", str(write_json(tmp_path / "t.json", rows)))
    msg = str(exc.value)
    assert "2 problem(s)" in msg
    assert "field 'question': the question text is empty" in msg
    assert "field 'answer': the answer 'perhaps' is not one of true/false" in msg
