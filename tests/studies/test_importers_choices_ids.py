"""What an item or rationale file may not hold: option labels or texts a worker, a model or a later
import cannot tell apart or read, T5 sentinel tokens in texts, bidirectional controls in ids. The
item rules are every item importer's (``importers.items``): generic, OpenBookQA and StrategyQA."""
import json

import pytest

from studies.models import Dataset, GeneralizationQuestion, Item, Rationale, RationaleSource
from studies.services.importers import (
    ImportValidationError,
    generalization_questions_import,
    items_import_openbookqa,
    items_import_strategyqa,
    items_import_table,
    rationales_import,
)
from tests.studies.helpers import write_json, write_jsonl

pytestmark = pytest.mark.django_db


def _refused(tmp_path, rows, *, name="D", task_format="multiple_choice", **kw):
    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=write_jsonl(tmp_path / "items.jsonl", rows), dataset_name=name,
                           task_format=task_format, **kw)
    assert Item.objects.count() == 0 and not Dataset.objects.filter(name=name).exists()
    return {(e.line, e.field): e.reason for e in exc.value.errors}


def test_a_label_given_twice_is_refused_on_its_option(tmp_path):
    rows = [{"id": "d1", "question": "Which conducts electricity?", "answer": "a",
             "choices": [{"label": "a", "text": "copper"}, {"label": "a", "text": "wood"},
                         {"label": "c", "text": "glass"}]}]
    errors = _refused(tmp_path, rows)
    assert list(errors) == [(1, "choices[1].label")]
    assert "also the label of choices[0]" in errors[(1, "choices[1].label")]


def test_an_option_text_given_twice_is_refused_without_case_or_spaces(tmp_path):
    rows = [{"id": "x1", "question": "Pick?", "choices": ["same", "other", " Same "], "answer": "b"},
            {"id": "x2", "question": "Pick?", "choices": ["one", "two", "two  and three"], "answer": "b"}]
    errors = _refused(tmp_path, rows)
    assert list(errors) == [(1, "choices[2]")]
    assert "also choices[0]" in errors[(1, "choices[2]")]


def test_a_label_no_reader_takes_is_refused(tmp_path):
    rows = [{"id": "m1", "question": "Pick?", "answer": "two",
             "choices": [{"label": "opt1", "text": "one"}, {"label": "opt2", "text": "two"}]},
            {"id": "m2", "question": "Pick?", "answer": "two",
             "choices": [{"label": "", "text": "one"}, {"label": "b", "text": "two"}]}]
    errors = _refused(tmp_path, rows)
    assert set(errors) == {(1, "choices[0].label"), (1, "choices[1].label"), (2, "choices[0].label")}
    assert "not one letter" in errors[(1, "choices[1].label")]
    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=write_jsonl(tmp_path / "ok.jsonl", [rows[1]]), dataset_name="D",
                           task_format="multiple_choice", choice_labels=["opt1", "opt2"])
    assert [e.field for e in exc.value.errors] == ["choice_labels", "choice_labels"]


def test_letter_labels_as_files_write_them_are_stored_as_read_and_a_rationale_predicts_one(tmp_path):
    """OpenBookQA's form (``A``..``D``, ``(a)``) keeps importing; the label stored is the one a
    rationale file's predicted answer is read as."""
    rows = [{"id": "m1", "question": "Pick the gas", "answer": "(B)",
             "choices": [{"label": "A", "text": "stone"}, {"label": "(b)", "text": "air"},
                         {"label": "C", "text": "sand"}, {"label": "d.", "text": "iron"}]}]
    items_import_table(file=write_jsonl(tmp_path / "mc.jsonl", rows), dataset_name="D", task_format="multiple_choice")
    item = Item.objects.get(external_id="m1")
    assert [c["label"] for c in item.choices] == ["a", "b", "c", "d"] == item.dataset.choice_labels
    assert item.gold_answer == "b"
    rationales_import(file=write_jsonl(tmp_path / "r.jsonl", [{"id": "m1", "rationale": "Air is a gas.",
                                                               "predicted_answer": "B"}]),
                      dataset_name="D", source_name="src")
    assert Rationale.objects.get().predicted_answer == "b"


@pytest.mark.parametrize("field, row", [
    ("question", {"question": "Pick <extra_id_0> because <extra_id_1> x?"}),
    ("rationale", {"rationale": "Because <extra_id_12>."}),
    ("choices[1]", {"choices": ["one", "two <extra_id_0>"]}),
])
def test_a_t5_sentinel_in_an_item_text_is_refused(tmp_path, field, row):
    rows = [{"id": "ok", "question": "Pick?", "choices": ["one", "two"], "answer": "a"},
            {"id": "x1", "question": "Pick?", "choices": ["one", "two"], "answer": "a", **row}]
    errors = _refused(tmp_path, rows)
    assert list(errors) == [(2, field)]
    assert "T5 sentinel" in errors[(2, field)]


def test_a_t5_sentinel_in_an_imported_rationale_is_refused(tmp_path):
    items_import_table(file=write_jsonl(tmp_path / "i.jsonl", [{"id": "y1", "question": "Is ice cold?",
                                                                 "answer": "yes"}]),
                       dataset_name="YN", task_format="yes_no")
    with pytest.raises(ImportValidationError) as exc:
        rationales_import(file=write_jsonl(tmp_path / "r.jsonl", [{"id": "y1", "rationale": "It is <extra_id_0>."}]),
                          dataset_name="YN", source_name="src")
    assert [(e.line, e.field) for e in exc.value.errors] == [(1, "rationale")]
    assert "<extra_id_0>" in exc.value.errors[0].reason
    assert not Rationale.objects.exists() and not RationaleSource.objects.exists()


def test_bidi_controls_are_refused_in_ids_and_names_and_kept_in_texts(tmp_path):
    path = tmp_path / "rlo.csv"
    path.write_text("id,question,answer\nq0,Is ice cold?,yes\nq1\u202egpj.exe,Is fire hot?,yes\n", encoding="utf-8")
    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=path, dataset_name="YN", task_format="yes_no")
    assert [(e.line, e.field) for e in exc.value.errors] == [(3, "id")]
    assert "U+202E" in exc.value.errors[0].reason and "\u202e" not in exc.value.errors[0].reason
    with pytest.raises(ImportValidationError) as exc:
        items_import_table(file=write_jsonl(tmp_path / "i.jsonl", [{"id": "q1", "question": "A?", "answer": "yes"}]),
                           dataset_name="YN\u2066x", task_format="yes_no")
    assert [e.field for e in exc.value.errors] == ["dataset"]
    assert not Item.objects.exists() and not Dataset.objects.exists()

    rtl = "\u200fهل الجليد بارد؟"
    items_import_table(file=write_jsonl(tmp_path / "i.jsonl", [{"id": "q1", "question": rtl, "answer": "yes"}]),
                       dataset_name="YN", task_format="yes_no")
    assert Item.objects.get().question == rtl
    for source_name, rows in [("src\u202e", [{"id": "q1", "rationale": "Cold."}]),
                              (None, [{"id": "q1", "rationale": "Cold.", "source": "t5\u200elarge"}])]:
        with pytest.raises(ImportValidationError) as exc:
            rationales_import(file=write_jsonl(tmp_path / "r.jsonl", rows), dataset_name="YN", source_name=source_name)
        assert [e.field for e in exc.value.errors] == ["source"]
    assert not RationaleSource.objects.exists()


def _obqa_record():
    """One record of OpenBookQA's release form (``*_complete.jsonl``)."""
    return {"id": "q1", "question": {"stem": "Which pulls iron?", "choices": [
        {"text": "a magnet", "label": "A"}, {"text": "a stone", "label": "B"}, {"text": "wood", "label": "C"},
        {"text": "glass", "label": "D"}]}, "fact1": "a magnet attracts iron", "answerKey": "A"}


def _obqa_with(change):
    ok, bad = _obqa_record(), _obqa_record()
    ok["id"] = "q0"
    change(bad)
    return [ok, bad]


@pytest.mark.parametrize("field, change, says", [
    ("id", lambda r: r.update(id="q1\u202egpj.exe"), "U+202E"),
    ("question.choices[1].text", lambda r: r["question"]["choices"][1].update(text="  A   Magnet "), "also question.choices[0].text"),
    ("question.choices[2].label", lambda r: r["question"]["choices"][2].update(label="(b)"), "also the label of question.choices[1]"),
    ("question.choices[3].text", lambda r: r["question"]["choices"][3].update(text="glass <extra_id_0>"), "T5 sentinel"),
    ("question.stem", lambda r: r["question"].update(stem="Pick <extra_id_0> one?"), "T5 sentinel"),
    ("fact1", lambda r: r.update(fact1="x <extra_id_1> y"), "T5 sentinel"),
])
def test_openbookqa_release_form_follows_the_item_rules(tmp_path, field, change, says):
    """The rules are every item importer's, not the generic one's only: the reviewer's record
    (a bidi id, options 'magnet' / 'Magnet', sentinels in the stem and fact1) was imported."""
    with pytest.raises(ImportValidationError) as exc:
        items_import_openbookqa(file=write_jsonl(tmp_path / "train_complete.jsonl", _obqa_with(change)))
    assert [(e.line, e.field) for e in exc.value.errors] == [(2, field)]
    assert says in exc.value.errors[0].reason and "\u202e" not in str(exc.value)
    assert not Item.objects.exists() and not Dataset.objects.exists()


def test_openbookqa_single_object_form_refuses_two_options_alike(tmp_path):
    records = {
        "0": {"question": "Which is a metal? (a) iron (b) wood (c) glass (d) paper", "answer": "(a)", "rationale": "dummy"},
        "1": {"question": "Which pulls iron? (a) magnet (b) Magnet (c) glass (d) paper", "answer": "(a)",
              "rationale": "dummy"},
        "2": {"question": "Which is wet? (a) sand (b) water (c) salt (d) chalk", "answer": "(b)",
              "rationale": "It is <extra_id_0>."}}
    path = tmp_path / "obqa_dev.jsonl"  # one record a line: lines 2, 3 and 4
    path.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in records.items()) + "\n}\n")
    with pytest.raises(ImportValidationError) as exc:
        items_import_openbookqa(file=path)
    assert [(e.line, e.field) for e in exc.value.errors] == [(3, "question (b)"), (4, "rationale")]
    assert "also question (a)" in exc.value.errors[0].reason
    assert not Item.objects.exists()


def test_openbookqa_letters_as_the_release_writes_them_still_import(tmp_path):
    rows = _obqa_with(lambda r: r["question"]["choices"].reverse())
    record = items_import_openbookqa(file=write_jsonl(tmp_path / "train_complete.jsonl", rows))
    assert record.created == 2
    item = Item.objects.get(external_id="q1")
    assert [c["label"] for c in item.choices] == ["a", "b", "c", "d"] and item.choices[0]["text"] == "a magnet"


def _strategyqa(qid="s1", **changes):
    return {"qid": qid, "term": "Ice", "description": "frozen water", "question": "Is ice cold?", "answer": True,
            "facts": ["Ice is frozen water."], "decomposition": ["What is ice?"], **changes}


@pytest.mark.parametrize("field, record", [
    ("qid", _strategyqa("s1\u2066x")),
    ("question", _strategyqa(question="Is <extra_id_0> cold?")),
    ("facts", _strategyqa(facts=["Ice is <extra_id_3>."])),
    ("rationale", _strategyqa(rationale="Ice <extra_id_0>.")),
])
def test_strategyqa_follows_the_item_rules(tmp_path, field, record):
    path = tmp_path / "strategyqa_processed_dev.json"
    path.write_text(json.dumps([_strategyqa("s0"), record], ensure_ascii=False, indent=1), encoding="utf-8")
    with pytest.raises(ImportValidationError) as exc:
        items_import_strategyqa(file=path)
    opens = next(n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if line.strip() == "{" and n > 2)
    assert [(e.line, e.field) for e in exc.value.errors] == [(opens, field)]
    assert not Item.objects.exists() and not Dataset.objects.exists()


def test_a_generalization_question_with_a_sentinel_is_refused(tmp_path):
    items_import_strategyqa(file=write_json(tmp_path / "strategyqa_processed_dev.json", [_strategyqa()]))
    path = tmp_path / "generalisation_final_dev.json"
    path.write_text(json.dumps({"Is ice cold?": [["Is ice chilly?", "True", "rephrase"],
                                                 ["Is <extra_id_0> cold?", "True", "similar"]]}, indent=1))
    with pytest.raises(ImportValidationError) as exc:
        generalization_questions_import(file=path, dataset_name="StrategyQA")
    lines = path.read_text().splitlines()
    row_opens = [line.strip() for line in lines].index('"Is <extra_id_0> cold?",')  # the line before, from 1
    assert [(e.line, e.field) for e in exc.value.errors] == [(row_opens, "question")]
    assert "<extra_id_0>" in exc.value.errors[0].reason
    assert not GeneralizationQuestion.objects.exists()
