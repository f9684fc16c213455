import json
import re

import pytest

from studies.models import Dataset, Item
from studies.services.importers import ImportValidationError, items_import_openbookqa
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def _original_rows():
    return [
        {"id": "7-980", "question": {"stem": "The sun is responsible for", "choices": [
            {"text": "puppies learning new tricks", "label": "A"}, {"text": "children growing up", "label": "B"},
            {"text": "flowers wilting in a vase", "label": "C"}, {"text": "plants sprouting, blooming", "label": "D"}]},
         "fact1": "the sun is the source of energy for physical cycles on Earth", "humanScore": 1.0,
         "answerKey": "D"},
        {"id": "7-584", "question": {"stem": "When standing miles away from Mount Rushmore", "choices": [
            {"text": "the mountains seem very close", "label": "A"}, {"text": "the mountains are boring", "label": "B"},
            {"text": "the mountains look the same as from up close", "label": "C"},
            {"text": "the mountains seem smaller than in photographs", "label": "D"}]},
         "fact1": "as distance to an object increases, that object will appear smaller", "answerKey": "D"},
    ]


@pytest.mark.parametrize("split, expected", [("dev", 499), ("test", 498)])
def test_real_single_object_files(openbookqa_dir, split, expected):
    path = openbookqa_dir / f"obqa_{split}.jsonl"
    record = items_import_openbookqa(file=path)
    assert record.created == expected
    raw = json.loads(path.read_text())
    items = Item.objects.filter(dataset__name="OpenBookQA", split=split)
    assert items.count() == expected
    for item in items:
        assert [c["label"] for c in item.choices] == ["a", "b", "c", "d"]
        assert all(c["text"] for c in item.choices)
        assert item.gold_answer in {"a", "b", "c", "d"}
        assert item.gold_rationale == ""  # "dummy" in the file
    first = items.get(external_id=f"{split}-0")
    m = re.match(r"^(.*)\(a\)(.*)\(b\)(.*)\(c\)(.*)\(d\)(.*)$", raw["0"]["question"])
    assert first.question == m.group(1).strip()
    assert [c["text"] for c in first.choices] == [g.strip() for g in m.groups()[1:]]
    assert first.gold_answer == raw["0"]["answer"].strip("()")
    dataset = Dataset.objects.get(name="OpenBookQA")
    assert (dataset.task_format, dataset.choice_labels) == ("multiple_choice", ["a", "b", "c", "d"])


def test_both_real_splits_live_side_by_side_and_reimport_is_a_no_op(openbookqa_dir):
    items_import_openbookqa(file=openbookqa_dir / "obqa_dev.jsonl")
    items_import_openbookqa(file=openbookqa_dir / "obqa_test.jsonl")
    again = items_import_openbookqa(file=openbookqa_dir / "obqa_test.jsonl")
    assert (again.created, again.updated, again.unchanged) == (0, 0, 498)
    assert Item.objects.count() == 499 + 498


def test_original_complete_jsonl(tmp_path):
    record = items_import_openbookqa(file=write_jsonl(tmp_path / "train_complete.jsonl", _original_rows()))
    assert record.created == 2
    item = Item.objects.get(external_id="7-980")
    assert item.split == "train"
    assert item.question == "The sun is responsible for"
    assert item.choices[3] == {"label": "d", "text": "plants sprouting, blooming"}
    assert item.gold_answer == "d"
    assert item.gold_rationale.startswith("the sun is the source")
    assert item.metadata["humanScore"] == 1.0


def test_original_form_bad_rows_reported_with_line_and_field(tmp_path):
    rows = _original_rows()
    rows[0]["question"]["choices"][1]["label"] = "E"
    rows[1]["answerKey"] = "Z"
    rows.append(dict(rows[1], answerKey="A"))  # duplicate id on line 3
    path = write_jsonl(tmp_path / "dev_complete.jsonl", rows)
    with pytest.raises(ImportValidationError) as exc:
        items_import_openbookqa(file=path)
    found = {(e.line, e.field) for e in exc.value.errors}
    assert found == {(1, "question.choices[1].label"), (2, "answerKey"), (3, "id")}
    assert Item.objects.count() == 0


def test_single_object_form_without_options_is_reported(tmp_path):
    path = tmp_path / "obqa_dev.jsonl"
    path.write_text(json.dumps({
        "0": {"question": "Which is a metal? (a) iron (b) wood (c) glass (d) paper", "answer": "(a)",
              "rationale": "dummy"},
        "1": {"question": "Which is a gas? oxygen or stone", "answer": "(a)", "rationale": "dummy"},
        "2": {"question": "Which is wet? (a) sand (b) water (c) salt (d) chalk", "answer": "(e)",
              "rationale": "Water is a liquid."},
    }))
    with pytest.raises(ImportValidationError) as exc:
        items_import_openbookqa(file=path)
    by_field = {e.field: e for e in exc.value.errors}
    assert set(by_field) == {"question", "answer"}
    assert "(a) ... (b)" in by_field["question"].reason
    assert "'(e)'" in by_field["answer"].reason
    assert by_field["question"].line == 1 and by_field["question"].column is not None


def test_a_record_that_is_not_an_object_leaves_the_others_their_keys(tmp_path):
    """The shared row parser (importers.rows.parse_rows) skips a record that is not an object:
    the records after it still read their own key (the item id is <split>-<key>)."""
    good = {"question": "Which is a metal? (a) iron (b) wood (c) glass (d) paper", "answer": "(a)",
            "rationale": "dummy"}
    path = tmp_path / "obqa_dev.jsonl"
    path.write_text(json.dumps({"0": good, "1": ["not", "an", "object"], "2": {**good, "answer": "(e)"}}))
    with pytest.raises(ImportValidationError) as exc:
        items_import_openbookqa(file=path)
    assert [(e.field, e.record, e.reason[:40]) for e in exc.value.errors] == [
        ("", "", "expected a JSON object, got a JSON list"),
        ("answer", "key '2'", "the answer '(e)' is not one of (a), (b),"),
    ]
    path.write_text(json.dumps({"0": good, "2": {**good, "answer": "(b)"}}))
    items_import_openbookqa(file=path)
    assert dict(Item.objects.values_list("external_id", "gold_answer")) == {"dev-0": "a", "dev-2": "b"}
