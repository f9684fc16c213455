"""A bundle's integers are held to the range of the column that stores them, as PostgreSQL holds it,
on every database: a hand-edited bundle whose quota, claim position or unit score count is past a
32-bit column (or whose study.json sample seed or source seed is) is refused by file, row and field,
and nothing is written. PostgreSQL refused such a row's insert with a DataError (a 500) while SQLite
kept it; now both give the same refusal."""
from __future__ import annotations

import io
import json

import pytest

from annotations.models import Claim, Unit
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import
from studies.models import RationaleSource, Study
from tests.scoring.test_bundle import _bundle, _edited_rows, _resign, _rewrite, _worked_study

pytestmark = pytest.mark.django_db

HUGE = 2**40  # within the bundle reader's 64 bits, past a 32-bit column


def _refused(data: bytes):
    """The import's errors; no study, unit or claim was made."""
    counts = (Study.objects.count(), Unit.objects.count(), Claim.objects.count())
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="edited-copy", filename="study.zip", owner=None)
    assert (Study.objects.count(), Unit.objects.count(), Claim.objects.count()) == counts
    return refused.value.errors


@pytest.mark.parametrize(("path", "cell", "value", "column"), [
    ("data/units.csv", "quota", HUGE, "Unit.quota holds at most 2147483647"),
    ("data/claims.csv", "position", HUGE, "Claim.position holds at most 2147483647"),
    ("data/unit_scores.csv", "n_annotators", HUGE, "UnitScore.n_annotators holds at most 2147483647"),
    ("data/unit_scores.csv", "utility", 2**20, "UnitScore.utility holds at most 32767"),
])
def test_a_cell_past_its_column_is_refused_by_file_row_and_field(path, cell, value, column):
    study = _worked_study()
    study_score(study=study, similarity=False)  # the bundle carries its unit scores
    data = _edited_rows(_bundle(study), path, (0, {cell: str(value)}))

    errors = _refused(data)

    error = next(e for e in errors if (e.record, e.field) == (path, cell))
    assert error.line == 2  # the first row after the header
    assert f"'{value}' is out of range ({column})" in error.reason


def _edited_design(data: bytes, change) -> bytes:
    def edit(content: bytes) -> bytes:
        design = json.loads(content)
        change(design)
        return json.dumps(design).encode()
    return _resign(_rewrite(data, "study.json", edit))


def test_a_study_json_sample_seed_past_its_column_is_refused_naming_it():
    data = _edited_design(_bundle(_worked_study()), lambda d: d["study"].update(sample_seed=HUGE))

    errors = _refused(data)

    assert [(e.record, e.field) for e in errors] == [("study.json", "study.sample_seed")]
    assert f"'{HUGE}' is out of range (Study.sample_seed holds at most 2147483647)" in errors[0].reason


def test_a_study_json_source_seed_past_its_column_is_refused_and_no_source_is_made():
    study = _worked_study()
    data = _bundle(study)
    RationaleSource.objects.filter(studies=study).delete()  # the import would make them anew
    sources = RationaleSource.objects.count()

    def change(design):
        design["sources"][0]["seed"] = HUGE
    errors = _refused(_edited_design(data, change))

    assert [(e.record, e.field) for e in errors] == [("study.json", "sources[0].seed")]
    assert "out of range (RationaleSource.seed holds at most 2147483647)" in errors[0].reason
    assert RationaleSource.objects.count() == sources
