"""What an item or rationale file may not hold: option labels or texts a worker, a model or a later
import cannot tell apart or read, T5 sentinel tokens in texts, bidirectional controls in ids."""
import pytest

from studies.models import Dataset, Item, Rationale, RationaleSource
from studies.services.importers import ImportValidationError, items_import_table, rationales_import
from tests.studies.helpers import write_jsonl

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
