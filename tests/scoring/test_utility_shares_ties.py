"""SPEC section 2 asks how many ties there were: each row of ``utility_shares`` (per source and over
all) counts its units without a majority before and after the rationale (``pipeline.tie_counts``,
the count ``majority_readings.by_source`` uses too), the report's utility table prints them, and
they agree with the API's per-source summary. A source whose not-useful share comes from ties no
longer reads like one whose answers were wrong."""
from __future__ import annotations

import pytest

from annotations.models import Assignment
from scoring.api.export_units import source_summaries
from scoring.models import ScoreRun
from scoring.reports.sections import utility_section
from scoring.services import study_score
from scoring.services.results_folder import utility_share_rows
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db


def test_each_source_row_counts_its_ties_and_the_report_prints_them(utility_study):
    study, items, good, bad = utility_study
    # good-lm: right answers, no tie.
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    collect(study, make_unit(study, items[1], good), [("yes", "yes")] * 5)
    # bad-lm: two units not useful by a 2-2 tie after (not wrong answers); one by wrong answers; one
    # with a tie before (2-2) and after (2-2).
    collect(study, make_unit(study, items[0], bad), [("yes", "yes"), ("yes", "yes"), ("yes", "no"), ("yes", "no")])
    collect(study, make_unit(study, items[1], bad), [("yes", "yes"), ("yes", "yes"), ("yes", "no"), ("yes", "no")])
    collect(study, make_unit(study, items[2], bad), [("yes", "no")] * 5)
    unit = make_unit(study, items[3], bad)
    collect(study, unit, [("yes", "yes"), ("no", "no"), ("yes", "no"), ("no", "yes")])
    collect(study, unit, [("yes", "yes")], status=Assignment.Status.REJECTED)  # rejected: does not count

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    shares = run.results["utility_shares"]
    ties = {name: (row["no_majority_before"], row["no_majority_after"]) for name, row in shares.items()}
    assert ties == {"good-lm": (0, 0), "bad-lm": (1, 3), "all": (1, 3)}
    assert shares["bad-lm"]["not_useful"] == 1.0  # the same share, now told apart by its ties
    # One count: the API's per-source summary gives the same numbers.
    api = {r["source_name"]: (r["n_before_ties"], r["n_after_ties"]) for r in source_summaries(study=study, user=None)}
    assert api == {"good-lm": (0, 0), "bad-lm": (1, 3)}
    # The report's utility table has them per source.
    section = utility_section(run.results)
    table = next(t for t in section.tables if t.name == "utility_shares")
    assert {"no_majority_before", "no_majority_after"} <= set(table.header())
    printed = {r["source"]: (r["no_majority_before"], r["no_majority_after"]) for r in table.rows}
    assert printed == ties
    assert any("No majority before / after" in n for n in section.notes)
    # And the results folder's utility_shares.csv (score_study --out) carries them.
    csv_rows = {r["source"]: (r["no_majority_before"], r["no_majority_after"]) for r in utility_share_rows(run.results)}
    assert csv_rows == ties


def test_a_run_from_before_the_ties_were_recorded_keeps_its_table():
    results = {"study": {"kind": "utility"}, "warnings": [], "utility_shares": {"all": {
        "n": 2, "useful": 0.5, "useful_ci": [0, 1], "unsure": 0.5, "unsure_ci": [0, 1], "not_useful": 0.0,
        "not_useful_ci": [0, 0]}}}
    table = next(t for t in utility_section(results).tables if t.name == "utility_shares")
    assert "no_majority_before" not in table.header()
