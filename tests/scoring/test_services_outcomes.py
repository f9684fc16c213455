"""Importing outcomes collected elsewhere, and scoring them."""
from __future__ import annotations

import io
import json
import re
from collections import Counter

import pytest

from scoring.models import ScoreRun, UnitScore
from scoring.services import outcomes_import, study_score
from studies.models import ImportRecord, Rationale, RationaleSource, Study
from studies.services.importers import ImportValidationError


def released_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_import_creates_one_unit_score_per_row_and_marks_the_study(imported_study, utility_file):
    summary = outcomes_import(study=imported_study, file=utility_file, user=None)

    imported_study.refresh_from_db()
    assert imported_study.is_imported_outcome
    assert summary["rows"] == summary["created"] == 1374
    assert summary["sources"] == ["gpt3", "t53b", "t5large"]
    assert UnitScore.objects.filter(study=imported_study, imported=True).count() == 1374
    assert Rationale.objects.filter(source__name="gpt3").count() == 458
    assert set(RationaleSource.objects.values_list("kind", flat=True)) == {"imported"}


def test_reimport_changes_nothing(imported_study, utility_file):
    outcomes_import(study=imported_study, file=utility_file, user=None)
    summary = outcomes_import(study=imported_study, file=utility_file, user=None)
    assert (summary["created"], summary["updated"], summary["unchanged"]) == (0, 0, 1374)
    assert UnitScore.objects.filter(study=imported_study).count() == 1374


def test_scoring_imported_outcomes_reproduces_released_utility_exactly(imported_study, utility_file):
    outcomes_import(study=imported_study, file=utility_file, user=None)

    run = study_score(study=imported_study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    # Key by the question's letters and digits only: the released GPT-3 rows carry stray
    # punctuation and escapes around otherwise identical questions.
    def key(text):
        return re.sub(r"[^a-z0-9]", "", text.lower())

    expected = {(key(r["question"]), r["rationale_source"]): r["rationale_utility"] for r in released_rows(utility_file)}
    assert len(expected) == 1374
    got = {
        (key(u.item.question), u.source.name): u.utility
        for u in UnitScore.objects.filter(study=imported_study).select_related("item", "source")
    }
    assert got == expected
    assert run.results["imported_utility_check"] == {"compared": 1374, "mismatches": 0}
    # Shares per source equal the counts in the file.
    counts = Counter((r["rationale_source"], r["rationale_utility"]) for r in released_rows(utility_file))
    for source in ("gpt3", "t53b", "t5large"):
        row = run.results["utility_shares"][source]
        assert row["n"] == 458
        assert row["useful"] == pytest.approx(counts[(source, 1)] / 458)
        assert row["not_useful"] == pytest.approx(counts[(source, -1)] / 458)
        assert row["useful_ci"][0] <= row["useful"] <= row["useful_ci"][1]
    # The release has no predicted labels: task accuracy is missing and said so.
    assert any("No task accuracy (predicted answer) available" in w for w in run.warnings)
    assert "theils_u_utility_given_task_accuracy" not in run.results


GOOD = {"question": "Did Gauss have a normal brain structure?", "rationale_source": "m",
        "ground_truth_label": False, "human_predicted_label_before_rationale": True,
        "human_predicted_label_after_rationale": False, "rationale_utility": 1}


def test_import_with_bad_rows_names_every_line_and_field_and_imports_nothing(imported_study):
    bad = dict(GOOD, question="Is this question in the dataset?")
    wrong_gold = dict(GOOD, ground_truth_label=True, rationale_source="n")
    bad_answer = dict(GOOD, rationale_source="o", human_predicted_label_after_rationale="maybe")
    data = "\n".join(json.dumps(r) for r in (GOOD, bad, wrong_gold, {"question": "x"}, bad_answer)) + "\n"

    with pytest.raises(ImportValidationError) as err:
        outcomes_import(study=imported_study, file=io.BytesIO(data.encode()), user=None)

    lines = err.value.lines()
    assert lines[0].startswith("line 2: field 'question': no item of dataset") and "import the dataset's items" in lines[0]
    assert lines[1].startswith("line 3: field 'ground_truth_label': 'yes' disagrees with the item's gold answer 'no'")
    assert lines[2].startswith("line 4: field 'rationale_source': missing field(s) rationale_source, ground_truth_label")
    assert lines[3] == "line 5: field 'human_predicted_label_after_rationale': 'maybe' is not an answer of this " \
        "dataset (yes/no (or True/False))"
    assert len(lines) == 4
    assert UnitScore.objects.count() == 0 and not ImportRecord.objects.filter(kind="outcomes").exists()
    assert not RationaleSource.objects.filter(name="m").exists()


def test_import_with_bad_json_names_the_line_and_column(imported_study):
    data = json.dumps(GOOD) + "\n{not json\n"
    with pytest.raises(ImportValidationError, match=r"line 2, column 2: not valid JSON"):
        outcomes_import(study=imported_study, file=io.BytesIO(data.encode()), user=None)
    assert UnitScore.objects.count() == 0


def test_import_over_the_upload_size_limit_is_refused_before_reading(imported_study, settings):
    settings.RL_MAX_IMPORT_BYTES = 100
    data = (json.dumps(GOOD) + "\n").encode()
    assert len(data) > 100
    with pytest.raises(ImportValidationError, match="over the import limit of 100 bytes"):
        outcomes_import(study=imported_study, file=io.BytesIO(data), user=None)
    assert UnitScore.objects.count() == 0
    imported_study.refresh_from_db()
    assert imported_study.status == Study.Status.DRAFT and not imported_study.is_imported_outcome


def test_import_closes_the_study_through_its_machine_and_records_the_file(imported_study):
    assert imported_study.status == Study.Status.DRAFT
    summary = outcomes_import(study=imported_study, file=io.BytesIO(json.dumps(GOOD).encode()), user=None)
    imported_study.refresh_from_db()
    assert imported_study.status == Study.Status.CLOSED and imported_study.is_imported_outcome
    record = ImportRecord.objects.get(kind="outcomes")
    assert (record.created, record.summary["study"], record.summary["rows"]) == (1, imported_study.pk, 1)
    assert summary["sources_created"] == ["m"]


def test_import_with_tie_scores_it_as_wrong(imported_study):
    row = {"question": "Did Gauss have a normal brain structure?", "rationale_source": "m",
           "ground_truth_label": False, "human_predicted_label_before_rationale": None,
           "human_predicted_label_after_rationale": False}
    outcomes_import(study=imported_study, file=io.BytesIO(json.dumps(row).encode()), user=None)

    run = study_score(study=imported_study, similarity=False)

    unit = UnitScore.objects.get(study=imported_study)
    assert unit.before_tie and unit.before_correct is False and unit.utility == 1
    assert run.results["ties"] == {"before": 1, "after": 0, "units_with_tie": 1}


def test_import_outcomes_command_creates_a_finished_study_and_prints_shares(utility_file, imported_study):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command(
        "import_outcomes", str(utility_file), "--dataset", imported_study.dataset.name,
        "--study", "Released outcomes", "--score", "--no-similarity", stdout=out,
    )
    text = out.getvalue()
    assert "imported utility check: 0 mismatches of 1374 rows" in text
    for source in ("gpt3", "t53b", "t5large"):
        assert f"\n{source}" in text
    again = StringIO()
    call_command(
        "import_outcomes", str(utility_file), "--dataset", imported_study.dataset.name,
        "--study", "Released outcomes", stdout=again,
    )
    assert "rows=1374, created=0, updated=0, unchanged=1374" in again.getvalue()


def test_import_outcomes_score_computes_similarity_and_names_its_model(utility_file, imported_study, tmp_path):
    pytest.importorskip("bert_score")
    from io import StringIO

    from django.core.management import call_command

    rows = utility_file.read_text().splitlines()
    small = tmp_path / "outcomes.jsonl"
    small.write_text("\n".join(rows[:12] + rows[458:470] + rows[916:928]) + "\n")
    out = StringIO()
    call_command("import_outcomes", str(small), "--dataset", imported_study.dataset.name, "--study", "Small",
                 "--score", stdout=out)
    text = out.getvalue()
    assert "correlation_ratio_utility_similarity: " in text and "similarity model: all-MiniLM-L6-v2" in text
    run = ScoreRun.objects.filter(study__name="Small").latest("pk")
    assert run.results["similarity"]["num_layers"] == 6
    assert UnitScore.objects.filter(study=run.study, similarity__isnull=False).count() == 36
