"""A hostile study bundle, re-signed after its edits, is refused by file, row and field and nothing
is kept: a table repeating its primary key, unit scores that are not those of the bundle's answers
(or hold values no run writes), identifiers with bidirectional controls and texts with T5 sentinel
tokens, and study.json values of the wrong type (never a 500)."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import
from scoring.services.bundle.importing import _KeysSeen
from studies.models import Study
from tests.scoring.test_bundle import _bundle, _edited_rows, _resign, _rewrite, _worked_study
from tests.scoring.test_bundle_borrowed_utility import _lender_and_borrower

pytestmark = pytest.mark.django_db


def _refused(data: bytes, name: str = "hostile-copy") -> list:
    studies = Study.objects.count()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name=name, owner=None)
    assert Study.objects.count() == studies  # all or nothing
    return refused.value.errors


def _scored_bundle() -> bytes:
    study = _worked_study()
    assert study_score(study=study, similarity=False).status == "done"
    return _bundle(study)


def _appended(data: bytes, path: str, change) -> bytes:
    """The bundle with every row of ``path`` given again, each changed by ``change`` (dict -> None)."""
    def edit(content: bytes) -> bytes:
        rows = list(csv.DictReader(io.StringIO(content.decode())))
        again = [dict(r) for r in rows]
        for row in again:
            change(row)
        out = io.StringIO()
        writer = csv.DictWriter(out, list(rows[0]), lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows + again)
        return out.getvalue().encode()
    return _resign(_rewrite(data, path, edit))


def _read(data: bytes, path: str) -> str:
    return zipfile.ZipFile(io.BytesIO(data)).read(path).decode()


def _design(data: bytes, change) -> bytes:
    def edit(content: bytes) -> bytes:
        design = json.loads(content)
        change(design)
        return json.dumps(design).encode()
    return _resign(_rewrite(data, "study.json", edit))


# --- A: a repeated primary key ----------------------------------------------------------------------


def test_a_borrowed_utility_row_given_again_is_refused_naming_its_file_row_and_key():
    _lender, borrower = _lender_and_borrower()
    assert study_score(study=borrower, similarity=False).status == "done"
    data = _appended(_bundle(borrower), "data/borrowed_utility.csv",
                     lambda row: row.update(utility=str(-int(row["utility"]) or 1)))

    errors = _refused(data)

    assert {(e.record, e.field) for e in errors} == {("data/borrowed_utility.csv", "item_id, source")}
    first = errors[0]
    assert first.line > 2 and "is given again (row 2 of data/borrowed_utility.csv has it)" in first.reason


def test_a_unit_score_row_given_again_is_refused_by_row_not_as_a_database_rule():
    data = _appended(_scored_bundle(), "data/unit_scores.csv", lambda row: None)
    errors = _refused(data)
    assert {(e.record, e.field) for e in errors} == {("data/unit_scores.csv", "item_id, source")}
    assert all(e.line and "given again" in e.reason and "UNIQUE" not in e.reason for e in errors)


# --- B: forged unit scores --------------------------------------------------------------------------


def test_unit_scores_that_are_not_those_of_the_bundles_answers_are_refused():
    data = _scored_bundle()
    n = len(list(csv.DictReader(io.StringIO(_read(data, "data/unit_scores.csv")))))
    forged = _edited_rows(data, "data/unit_scores.csv", *((i, {
        "utility": "1", "after_correct": "true", "before_correct": "false", "before_tie": "false",
        "after_tie": "false"}) for i in range(n)))

    errors = _refused(forged)

    assert errors and {e.record for e in errors} == {"data/unit_scores.csv"}
    assert all(e.line >= 2 and e.field in ("before_correct", "after_correct", "utility", "before_majority",
                                           "after_majority", "before_tie", "after_tie") for e in errors)
    assert "where the bundle's answers give" in errors[0].reason


@pytest.mark.parametrize(("cells", "field", "reason"), [
    ({"utility": "7"}, "utility", "7 is not -1, 0 or 1"),
    ({"n_annotators": "-2"}, "n_annotators", "-2 is below 0"),
    # no tie on either step, whatever the simulated crowd gave the row (a tie is refused first, on its own field)
    ({"utility": "1", "before_correct": "true", "after_correct": "true", "before_tie": "false", "after_tie": "false"},
     "utility", "give 0"),
])
def test_a_unit_score_no_run_writes_is_refused_naming_the_field(cells, field, reason):
    errors = _refused(_edited_rows(_scored_bundle(), "data/unit_scores.csv", (0, cells)))
    assert [(e.record, e.line, e.field) for e in errors] == [("data/unit_scores.csv", 2, field)]
    assert reason in errors[0].reason


# --- C: bidirectional controls and T5 sentinels --------------------------------------------------


def _source_renamed(design: dict) -> None:
    design["sources"][0]["name"] = "evil\u202esource"


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: _design(d, _source_renamed), ("study.json", "sources.name")),
    (lambda d: _design(d, lambda s: s["dataset"].update(name="ds\u202eevil")), ("study.json", "dataset.name")),
    (lambda d: _edited_rows(d, "data/items.csv", (0, {"external_id": "item-\u202e1"})),
     ("data/items.csv", "external_id")),
    (lambda d: _edited_rows(d, "data/items.csv", (0, {"question": "Is it <extra_id_0> true?"})),
     ("data/items.csv", "question")),
    (lambda d: _edited_rows(d, "data/rationales.csv", (0, {"text": "Because <extra_id_0> so."})),
     ("data/rationales.csv", "text")),
    (lambda d: _design(d, lambda s: s["attention_checks"][0].update(question="Pick <extra_id_1> yes")),
     ("study.json", "attention_checks[0].question")),
])
def test_an_identifier_with_a_bidi_control_or_a_text_with_a_sentinel_is_refused_by_row(edit, where):
    errors = _refused(edit(_bundle(_worked_study())))
    assert where in {(e.record, e.field) for e in errors}
    reason = next(e.reason for e in errors if (e.record, e.field) == where)
    assert "bidirectional control" in reason or "T5 sentinel token" in reason


def test_a_study_name_with_a_bidi_control_is_refused():
    errors = _refused(_bundle(_worked_study()), name="copy\u202eevil")
    assert [(e.field, "bidirectional control" in e.reason) for e in errors] == [("name", True)]


# --- D: study.json values of the wrong type ------------------------------------------------------


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: s.update(qualification_test={"questions": []}), "qualification_test.pass_mark"),
    (lambda s: s.update(qualification_test="x"), "qualification_test"),
    (lambda s: s["qualification_test"].update(pass_mark=10**30), "qualification_test.pass_mark"),
    (lambda s: s["study"].update(reward="abc"), "study.reward"),
    (lambda s: s["study"].update(reward=[1]), "study.reward"),
    (lambda s: s["qualification_test"]["questions"][0].update(choices="notalist"),
     "qualification_test.questions[0].choices"),
    (lambda s: s["qualification_test"]["questions"][0].update(correct_answer="maybe"),
     "qualification_test.questions[0].correct_answer"),
    (lambda s: s["study"].update(consent_text=["x"]), "study.consent_text"),
    (lambda s: s["dataset"].update(name="a-new-dataset", choice_labels="ab"), "dataset.choice_labels"),
])
def test_a_design_value_of_the_wrong_type_is_refused_naming_it(change, field):
    errors = _refused(_design(_bundle(_worked_study()), change))
    assert field in {e.field for e in errors if e.record == "study.json"}, errors


def test_ids_out_of_order_are_checked_aside_from_the_runs_and_a_repeat_is_still_found():
    """A table whose ids fall (a hand-made bundle: 100k even ids descending, then the odd ones)
    is checked in O(n log n): an id below the last one is looked up by bisection and kept aside,
    never inserted into the runs of ascending ids (an insert per id was quadratic: 400k such ids
    took 32 s); a repeat is found wherever the earlier id was kept."""
    seen = _KeysSeen()
    n = 200_000
    assert all(seen.add((i,), line) is None for line, i in enumerate(range(n - 2, -1, -2), start=2))
    assert (list(seen._start), list(seen._end)) == ([n - 2], [n - 1])  # only the first id made a run
    assert all(seen.add((i,), 0) is None for i in range(1, n, 2))  # n - 1 extends the run, the others aside
    assert (list(seen._start), list(seen._end)) == ([n - 2], [n])
    for repeat in (n - 2, n - 1, 0, 4, 3, n // 2 + 1):
        assert seen.add((repeat,), 0) == 0, repeat
    assert [seen.add((i,), 0) for i in (n + 5, n + 6, n, n + 5, n)] == [None, None, None, 0, 0]
    assert seen.add((-1,), 0) is None and seen.add((-1,), 0) == 0


def test_an_annotation_table_in_reverse_id_order_imports_and_a_repeat_in_it_is_refused():
    """Ids out of order are no error of their own; a repeated one is refused by row."""
    def reversed_rows(extra):
        def edit(content: bytes) -> bytes:
            rows = list(csv.DictReader(io.StringIO(content.decode())))
            out = io.StringIO()
            writer = csv.DictWriter(out, list(rows[0]), lineterminator="\r\n")
            writer.writeheader()
            writer.writerows(rows[::-1] + [dict(rows[len(rows) // 2])] * extra)
            return out.getvalue().encode()
        return edit
    data = _bundle(_worked_study())

    study = bundle_import(file=io.BytesIO(_resign(_rewrite(data, "data/annotations.csv", reversed_rows(0)))),
                          name="reversed-copy", owner=None)
    assert study.pk
    errors = _refused(_resign(_rewrite(data, "data/annotations.csv", reversed_rows(1))))
    assert {(e.record, e.field) for e in errors} == {("data/annotations.csv", "annotation_id")}
    assert "is given again (an earlier row of data/annotations.csv has it)" in errors[0].reason
