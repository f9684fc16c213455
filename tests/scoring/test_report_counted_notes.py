"""The published figures count the answers of tasks that failed an attention check (results.json
``counted_answers`` says so and gives the other readings): every table that prints a figure of
those answers says it. ``agreement.csv`` has a ``note`` naming the counted answers and alpha without
the failing tasks, the report's agreement section carries the counted-answers note as the utility
section does, and every row of ``associations.csv`` (each one a measure of utility) carries the
utility note: the majority and tie rule and the answers counted. ``theils_u_degenerate`` is not a
measure: no row of its own, its cells said in the rows they concern. Built through the
questionnaire's services (``tests.scoring.test_other_readings._task``) and ``score_run_export``."""
from __future__ import annotations

import csv

import pytest

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve
from scoring.models import ScoreRun
from scoring.reports.sections import agreement_section
from scoring.services import score_run_export, study_score
from scoring.services.results_folder import agreement_rows, association_rows
from studies.models import Study
from tests.scoring.test_generalization_readings import _generalization_study
from tests.scoring.test_other_readings import _check, _task
from tests.scoring.test_services_score import make_unit

pytestmark = pytest.mark.django_db

FAILING_PATH = "counted_answers.other_readings.without_tasks_failing_any_check.agreement"


@pytest.fixture
def failing_run(utility_study):
    """8 units (4 items x good-lm, bad-lm), each answered by 2 careful workers (approved, their check
    right; before "no", after "yes" with good-lm and "no" with bad-lm) and 1 unreviewed task that
    failed its check and answers otherwise: published alpha counts the failing tasks; without them
    the careful answers agree (alpha after 1.0)."""
    study, items, good, bad = utility_study
    Study.objects.filter(pk=study.pk).update(annotators_per_unit=3)
    check = _check(study, 1)
    for item in items:
        for source in (good, bad):
            unit = make_unit(study, item, source, quota=3)
            after = "yes" if source == good else "no"
            for _ in range(2):
                assignment_approve(user=OPERATOR, study=study,
                                   assignment=_task(study, unit, "no", after, checks=[(check, "no")]))
            _task(study, unit, "yes", "no" if after == "yes" else "yes", checks=[(check, "yes")])
    run = study_score(study=study, similarity=False, both_directions=True)
    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["counted_answers"]["tasks_failing_an_attention_check"] == 8
    return run


def test_agreement_csv_and_report_say_the_failing_tasks_count_and_point_to_the_other_reading(failing_run, tmp_path):
    results = failing_run.results
    without = results["counted_answers"]["other_readings"]["without_tasks_failing_any_check"]["agreement"]
    assert without["after"]["krippendorff_alpha"] == 1.0
    assert results["agreement"]["after"]["krippendorff_alpha"] != 1.0

    rows = agreement_rows(results)
    assert rows and all("8 counted tasks failed an attention check" in row["note"] for row in rows)
    published = [row for row in rows if row["reading"] == "published"]
    by_item = [row for row in rows if row["reading"] == "by item"]
    assert published and all(FAILING_PATH in row["note"] and "after 1.000" in row["note"] for row in published)
    # the by-item reading has no reading without the failing tasks: its note quotes no per-unit alpha
    assert "agreement_by_item" not in results["counted_answers"]["other_readings"]["without_tasks_failing_any_check"]
    assert by_item and all("1.000" not in row["note"] and "has no agreement_by_item reading without them"
                           in row["note"] for row in by_item)

    score_run_export(run=failing_run, out_dir=tmp_path)
    with (tmp_path / "agreement.csv").open(encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    assert written and all(FAILING_PATH in row["note"] for row in written if row["reading"] == "published")

    notes = " ".join(agreement_section(results).notes)
    assert "8 of them failed an attention check" in notes
    assert "Other reading, without the tasks that failed any attention check" in notes


def test_every_association_row_carries_the_utility_note_and_no_metadata_row(failing_run, tmp_path):
    results = failing_run.results
    # every unit of bad-lm has the same utility: its U cells are 1 by definition (metadata, not a measure)
    assert results["theils_u_degenerate"]
    rows = association_rows(results)
    measures = {row["measure"] for row in rows}
    assert "theils_u_degenerate" not in measures
    assert {"theils_u_utility_given_task_accuracy", "theils_u_task_accuracy_given_utility"} <= measures
    for row in rows:
        assert "majority of the annotators" in row["note"], row
        assert "8 counted tasks failed an attention check" in row["note"], row
    for key, cells in results["theils_u_degenerate"].items():
        for source in cells:
            row = next(r for r in rows if r["measure"] == key and r["source"] == source)
            assert "U is 1 by definition" in row["note"]

    score_run_export(run=failing_run, out_dir=tmp_path)
    with (tmp_path / "associations.csv").open(encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    assert {row["measure"] for row in written} == measures


def test_a_generalization_study_agreement_names_what_it_counts(utility_study, tmp_path):
    gen_study, _cf, _rp = _generalization_study(utility_study)
    run = study_score(study=gen_study)
    assert run.status == ScoreRun.Status.DONE, run.error
    counted = run.results["counted_answers"]
    assert counted["tasks_failing_an_attention_check"] == 3
    assert "agreement" in counted["other_readings"]["without_tasks_failing_any_check"]

    rows = agreement_rows(run.results)
    assert rows and all("3 counted tasks failed an attention check" in row["note"] for row in rows)
    assert all(FAILING_PATH in row["note"] for row in rows if row["reading"] == "published")
    assert all("has no agreement_by_item reading without them" in row["note"] for row in rows
               if row["reading"] == "by item")
    notes = " ".join(agreement_section(run.results).notes)
    assert "3 of them failed an attention check" in notes
    # the other reading printed is the generalization study's own (Figure 4), not utility shares
    assert "useful" not in notes.split("Other reading, without the tasks that failed any attention check")[1][:300]
