"""What the readers of ``studies.services.importers.reading`` refuse and keep, through the importers.

Non-finite JSON numbers: Python's parser reads ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON) and
turns ``1e400`` into infinity. A row holding one in a JSON field crashed the import on the database
(SQLite's ``JSON_VALID`` check, PostgreSQL's ``jsonb``: a 500, a background job failed with no row
named), and one in a text field was stored as ``"inf"``. Each is now a row error naming its line and
field, and nothing is written.

Apostrophes: the CSV sniffer guessed ``'`` as the quote character for a cell starting with one
(``'Frozen' water is ice?``) and dropped it. Only ``"`` quotes a field (RFC 4180)."""
from __future__ import annotations

import pytest

from studies.models import Dataset, ImportRecord, Item, Rationale, RationaleSource
from studies.services.importers import ImportValidationError, import_run
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db

NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


def refused(exc: ImportValidationError) -> list[tuple[int | None, str, str]]:
    return [(e.line, e.field, e.reason) for e in exc.errors]


def nothing_written():
    return not (Dataset.objects.exists() or Item.objects.exists() or ImportRecord.objects.exists())


def is_non_finite_reason(reason: str, number: str) -> bool:
    word = "NaN" if number == "NaN" else ("-Infinity" if number.startswith("-") else "Infinity")
    return reason.startswith(f"the number is {word}") and "which JSON cannot hold" in reason


@pytest.mark.parametrize("number", NON_FINITE)
def test_a_non_finite_number_in_an_items_jsonl_row_is_a_row_error_and_nothing_is_written(tmp_path, number):
    path = tmp_path / "items.jsonl"
    path.write_text('{"id":"x0","question":"Is it?","answer":"no"}\n'
                    f'{{"id":"x1","question":"Q?","answer":"yes","extra":{number}}}\n')
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="items", file=path, dataset_name="nan", task_format="yes_no")
    [(line, field, reason)] = refused(err.value)
    assert (line, field) == (2, "extra")
    assert is_non_finite_reason(reason, number), reason
    assert nothing_written()


@pytest.mark.parametrize("field", ["id", "question"])
def test_a_number_too_large_in_a_text_field_is_refused_not_stored_as_inf(tmp_path, field):
    row = {"id": '"x1"', "question": '"Q?"', "answer": '"yes"', field: "1e400"}
    path = tmp_path / "items.jsonl"
    path.write_text("{" + ",".join(f'"{k}":{v}' for k, v in row.items()) + "}\n")
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="items", file=path, dataset_name="inf", task_format="yes_no")
    [(line, named, reason)] = refused(err.value)
    assert (line, named) == (1, field) and is_non_finite_reason(reason, "1e400")
    assert nothing_written() and not Item.objects.filter(question="inf").exists()


def test_a_non_finite_number_nested_in_a_json_list_file_names_its_line_and_path(tmp_path):
    path = tmp_path / "items.json"
    path.write_text('[\n {"id": "x0", "question": "Is it?", "answer": "no"},\n'
                    ' {"id": "x1", "question": "Q?", "answer": "yes", "extra": {"scores": [1, NaN]}}\n]\n')
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="items", file=path, dataset_name="nan", task_format="yes_no")
    [(line, field, reason)] = refused(err.value)
    assert (line, field) == (3, "extra.scores[1]") and is_non_finite_reason(reason, "NaN")
    assert nothing_written()


def test_a_strategyqa_term_that_is_nan_is_refused(tmp_path):
    path = tmp_path / "strategyqa_processed_dev.json"
    path.write_text('[{"qid": "q1", "term": NaN, "description": "D", "question": "Is it so?",'
                    ' "answer": true, "facts": ["F."], "decomposition": ["Is it?"]}]')
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="strategyqa", file=path)
    [(line, field, reason)] = refused(err.value)
    assert (line, field) == (1, "term") and is_non_finite_reason(reason, "NaN")
    assert not Item.objects.exists() and not ImportRecord.objects.exists()


@pytest.fixture
def yes_no_items():
    dataset = DatasetFactory(name="YN")
    ItemFactory(dataset=dataset, external_id="q1", question="Is ice cold?", gold_answer="yes")
    return dataset


@pytest.mark.parametrize(("row", "field"), [
    ('{"item_id":"q1","source":"s","rationale":"Because.","score":NaN}', "score"),  # kept in generation_info
    ('{"item_id":"q1","source":"s","rationale":1e400}', "rationale"),  # was stored as the text "inf"
    ('{"item_id":"q1","source":"s","rationale":"Because.","highlights":[[0, Infinity]]}', "highlights[0][1]"),
])
def test_a_non_finite_number_in_a_rationale_row_is_a_row_error(tmp_path, yes_no_items, row, field):
    path = tmp_path / "rationales.jsonl"
    path.write_text(row + "\n")
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="rationales", file=path, dataset_name="YN")
    [(line, named, reason)] = refused(err.value)
    assert (line, named) == (1, field) and reason.startswith("the number is ")
    assert not Rationale.objects.exists() and not RationaleSource.objects.exists()
    assert not ImportRecord.objects.exists()


def test_a_nan_in_a_csv_cell_of_json_is_refused(tmp_path, yes_no_items):
    path = tmp_path / "rationales.csv"
    path.write_text('item_id,source,rationale,highlights\nq1,s,Because.,"[[0, NaN]]"\n')
    with pytest.raises(ImportValidationError) as err:
        import_run(kind="rationales", file=path, dataset_name="YN")
    [(line, field, reason)] = refused(err.value)
    assert (line, field) == (2, "highlights") and "NaN" in reason
    assert not Rationale.objects.exists()


def test_finite_numbers_still_import(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text('{"id":"x1","question":"Q?","answer":"yes","extra":{"p":0.25,"n":-3,"big":1.5e10}}\n')
    record = import_run(kind="items", file=path, dataset_name="fine", task_format="yes_no")
    assert record.created == 1
    assert Item.objects.get().metadata["extra"] == {"p": 0.25, "n": -3, "big": 1.5e10}


# --- apostrophes in CSV -----------------------------------------------------------------------------

APOSTROPHES = {
    "q1": "'Frozen' water is ice?",
    "q2": "'Frozen'",
    "q3": "Is it Alice's 'best' day?",
    "q4": 'Is "ice", frozen, cold?',
}


@pytest.mark.parametrize(("name", "sep"), [("items.csv", ","), ("items.tsv", "\t"), ("items.txt", ";")])
def test_apostrophes_in_csv_cells_are_kept(tmp_path, name, sep):
    def cell(text: str) -> str:
        return '"' + text.replace('"', '""') + '"' if '"' in text or sep in text else text

    path = tmp_path / name
    path.write_text(sep.join(["id", "question", "answer"]) + "\n"
                    + "".join(sep.join([k, cell(q), "yes"]) + "\n" for k, q in APOSTROPHES.items()))
    record = import_run(kind="items", file=path, dataset_name="quotes", task_format="yes_no", file_format="csv")
    assert record.created == 4
    assert dict(Item.objects.values_list("external_id", "question")) == APOSTROPHES


@pytest.mark.parametrize("sep", ["\t", ";"])
def test_tab_and_semicolon_files_import(tmp_path, sep):
    path = tmp_path / "items.csv"
    path.write_text(sep.join(["id", "question", "answer"]) + "\n"
                    + "".join(sep.join([f"q{i}", f"Is {i}, or not, odd?", "no"]) + "\n" for i in range(3)))
    record = import_run(kind="items", file=path, dataset_name="sep", task_format="yes_no")
    assert record.created == 3 and Item.objects.get(external_id="q1").question == "Is 1, or not, odd?"
