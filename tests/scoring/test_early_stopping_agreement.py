"""Agreement under early stopping: a unit stops collecting once its result is decided, which is
when its answers agree (a yes/no unit of 5 stopped at 3 answers is 3-0), so agreement over the
answers collected reads higher than the full design's. The same simulated crowd
(``test_early_stopping_score.run``) answers a study that collects all five answers and one that
stops units early: the stopping study's results and report say the bias, give the reading over the
units that filled (``filled_units``) and leave out the most-common-count kappa, whose units may be
stopped ones; the full study's agreement is as it always was."""
from __future__ import annotations

import pandas as pd
import pytest

from scoring.metrics import pipeline
from scoring.reports.sections import report_sections
from scoring.services.results_folder import AGREEMENT_COLUMNS, agreement_rows
from tests.scoring.test_early_stopping_score import run

pytestmark = pytest.mark.django_db


def test_a_study_that_stops_units_early_says_agreement_is_biased_up_and_gives_the_filled_units():
    _full_study, full_run, _ = run(stop=False)
    _study, stopped_run, _ = run(stop=True)
    early = stopped_run.results["early_stopping"]
    assert early["units_decided"] > 0
    assert early["agreement_bias"] and "biased upward by early stopping" in early["agreement_bias"].lower()
    assert "biased upward by early stopping" in early["note"].lower() and "filled_units" in early["note"]
    for key in ("agreement", "agreement_by_item"):
        for step, row in stopped_run.results[key].items():
            assert "biased upward by early stopping" in row["early_stopping_bias"].lower(), (key, step)
            assert "the paper" not in row["early_stopping_bias"].lower()
            # the most-common-count kappa is left out: its units may be stopped ones, unanimous by the rule
            assert "fleiss_kappa_full_units" not in row, (key, step, row)
            if row["fleiss_kappa"] is None:
                assert "left out" in row["fleiss_kappa_note"] and "stopped" in row["fleiss_kappa_note"]
            filled = row["filled_units"]
            assert filled["raters"] == 5 and filled["rule"] == pipeline.FILLED_UNITS_RULE
            assert 0 < filled["n_annotations"] < row["n_annotations"]
    # the filled units' reading over the stopping study is alpha over its units that got all 5
    # answers: the full study's same crowd gives those units the same answers
    before = stopped_run.results["agreement"]["before"]
    assert before["filled_units"]["n_units"] == stopped_run.results["early_stopping"]["answers_per_unit"]["5"]
    assert before["filled_units"]["fleiss_kappa"] is not None  # every filled unit has 5 raters
    assert before["krippendorff_alpha"] > before["filled_units"]["krippendorff_alpha"]
    # the study that collected everything is unchanged: no bias note, no filled units
    for key in ("agreement", "agreement_by_item"):
        for row in full_run.results[key].values():
            assert "early_stopping_bias" not in row and "filled_units" not in row


def test_the_report_prints_the_bias_and_the_filled_units_where_it_prints_agreement():
    _study, stopped_run, _ = run(stop=True)
    section = {s.key: s for s in report_sections(stopped_run)}["agreement"]
    assert any("biased upward by early stopping" in n.lower() for n in section.notes)
    steps = [row["step"] for row in section.tables[0].rows]
    assert "before, filled units only (5 answers)" in steps and "after, filled units only (5 answers)" in steps
    _full, full_run, _ = run(stop=False)
    full = {s.key: s for s in report_sections(full_run)}["agreement"]
    assert not any("biased upward" in n.lower() for n in full.notes)
    assert not any("filled units" in row["step"] for row in full.tables[0].rows)


def _frames(per_unit: dict[int, list[str]], quotas: dict[int, int]):
    units = pd.DataFrame({"unit_id": list(per_unit), "item_id": list(per_unit), "source": "model", "gold": "yes",
                          "expected_raters": [quotas[u] for u in per_unit]})
    answers = pd.DataFrame([{"unit_id": u, "step": step, "answer": a}
                            for u, labels in per_unit.items() for a in labels for step in ("before", "after")])
    return units, answers


def test_units_stopped_at_three_unanimous_give_no_most_common_count_kappa():
    """The Prolific study's shape: 7 units stopped at 3 (3-0 by the stopping rule), 1 filled to 5.
    Kappa over the 7 three-rater units would be 1.0 by construction: it is left out, and the
    filled unit's reading is given beside alpha over the answers collected."""
    per_unit = {u: ["yes"] * 3 if u % 2 else ["no"] * 3 for u in range(1, 8)}
    per_unit[8] = ["yes", "yes", "no", "yes", "no"]
    quotas = {u: 3 for u in range(1, 8)} | {8: 5}
    units, answers = _frames(per_unit, quotas)
    block = pipeline.collected_outcomes(units, answers, expected_raters=5).results["agreement"]
    for row in block.values():
        assert row["fleiss_kappa"] is None and "fleiss_kappa_full_units" not in row
        assert row["early_stopping_bias"] == pipeline.EARLY_STOPPING_AGREEMENT_BIAS
        assert row["filled_units"]["n_units"] == 1 and row["filled_units"]["n_annotations"] == 5
    # the same answers where no unit was stopped (every quota the design's): as before
    units_full, _ = _frames(per_unit, dict.fromkeys(per_unit, 5))
    for frame in (units_full, units.drop(columns=["expected_raters"])):
        row = pipeline.collected_outcomes(frame, answers, expected_raters=5).results["agreement"]["before"]
        assert row["fleiss_kappa_full_units"] == {"rule": pipeline.FLEISS_FULL_UNITS, "raters": 3, "n_units": 7,
                                                  "fleiss_kappa": 1.0}
        assert "early_stopping_bias" not in row and "filled_units" not in row


def test_every_unit_stopped_at_the_same_count_gives_no_kappa_by_construction():
    """Every unit stopped at 3 of 5, so every unit has as many raters: kappa over all of them would
    be 1.0 by the stopping rule, and is left out with the reason; no unit filled, so the filled
    units' reading is empty, not an error."""
    per_unit = {u: ["yes"] * 3 if u % 2 else ["no"] * 3 for u in range(1, 5)}
    units, answers = _frames(per_unit, dict.fromkeys(per_unit, 3))
    for row in pipeline.collected_outcomes(units, answers, expected_raters=5).results["agreement"].values():
        assert row["fleiss_kappa"] is None and "stopping rule" in row["fleiss_kappa_note"]
        assert row["filled_units"]["n_units"] == 0 and row["filled_units"]["fleiss_kappa"] is None


def test_agreement_csv_carries_the_bias_and_the_filled_units():
    """``agreement.csv`` (the results folder) says what results.json says: the bias note and the
    filled units' figures have their columns, so the CSV alone does not show an inflated figure unflagged."""
    per_unit = {u: ["yes"] * 3 if u % 2 else ["no"] * 3 for u in range(1, 8)}
    per_unit[8] = ["yes", "yes", "no", "yes", "no"]
    units, answers = _frames(per_unit, {u: 3 for u in range(1, 8)} | {8: 5})
    results = {"agreement": pipeline.collected_outcomes(units, answers, expected_raters=5).results["agreement"]}
    rows = agreement_rows(results)
    assert {r["early_stopping_bias"] for r in rows} == {pipeline.EARLY_STOPPING_AGREEMENT_BIAS}
    assert {(r["filled_units_n"], r["filled_units_annotations"]) for r in rows} == {(1, 5)}
    assert {"early_stopping_bias", "filled_units_n", "filled_units_alpha", "filled_units_kappa"} <= set(AGREEMENT_COLUMNS)
