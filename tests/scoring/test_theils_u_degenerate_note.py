"""Theil's U(utility | X) is 1 by definition where utility does not vary (SPEC: U = 1 when
H(X) = 0): the run records those cells (results.json ``theils_u_degenerate``) and the report names
them under the table, the values unchanged. And an other reading of the counted answers that keeps
the same answers as an earlier one that scored nothing repeats its note (``pipeline.other_readings``),
so the report never says "None units scored"."""
from __future__ import annotations

import pytest

from scoring.models import ScoreRun
from scoring.reports.sections import other_readings_notes, report_sections
from scoring.services import study_score
from studies.models import Platform
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def test_report_names_the_cells_where_utility_does_not_vary():
    study = open_utility_study(name="tu-const", n_items=2, n_sources=2, quota=1, platform=Platform.LINK)
    constant, varying = sorted(s.name for s in study.sources.all())

    def answer(claim, step):
        # the first source is useful on every unit; the second useful on one item, not useful on the other
        if step == "before":
            return "no"
        wrong = claim.unit.source.name == varying and claim.unit.item.external_id.endswith("q1")
        return "no" if wrong else claim.unit.item.gold_answer

    work(study, "PID-tu-a", platform=Platform.LINK, answer=answer)
    work(study, "PID-tu-b", platform=Platform.LINK, answer=answer)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error

    key = "theils_u_utility_given_task_accuracy"
    assert run.results[key][constant] == 1.0  # the value is kept: SPEC's U = 1 when H(utility) = 0
    assert run.results["theils_u_degenerate"] == {key: {constant: "utility_constant"}}

    (section,) = [s for s in report_sections(run) if s.key == "theils_u"]
    assert (f"U(utility | task accuracy): utility does not vary for {constant}: U is 1 by definition and says "
            "nothing.") in section.notes
    assert not any(varying in note and "by definition" in note for note in section.notes)


def test_a_reading_the_same_as_one_that_scored_nothing_keeps_its_note():
    # submitted, never reviewed, and answered far too fast: approved_tasks_only and without_speeding_tasks keep
    # the same (no) answers
    study = open_utility_study(name="tu-note", n_items=2, n_sources=1, quota=1, platform=Platform.LINK)
    work(study, "PID-note", platform=Platform.LINK, shown_for=0.2)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    readings = run.results["counted_answers"]["other_readings"]
    assert readings["without_speeding_tasks"]["identical_to"] == "approved_tasks_only", readings
    assert readings["without_speeding_tasks"]["note"] == readings["approved_tasks_only"]["note"]
    assert readings["approved_tasks_only"]["note"]
    notes = other_readings_notes(run.results["counted_answers"])
    assert not any("None units scored" in note for note in notes), notes
