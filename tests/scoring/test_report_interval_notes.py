"""Every interval is printed with the bootstrap that drew it, and the report draws its own intervals
(Theil's U, eta) with the run's recorded settings; the similarity-bin row of associations.csv names
its bins and the other bin counts' U."""
from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from scoring.metrics import pipeline
from scoring.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from scoring.reports.intervals import correlation_ratio_draws, percentile_ci, theils_u_draws
from scoring.reports.sections import gen_u_section, similarity_section, theils_u_section
from scoring.services.results_folder import (
    association_rows,
    bootstrap_note,
    gen_u_share_rows,
    generalization_rows,
    score_run_export,
)
from tests.scoring.test_what_figures_rest_on import _gen_u_run

BOOT = {"method": "percentile", "confidence": 0.9, "n_resamples": 300, "seed": 7}
NOTE = "90% intervals: percentile bootstrap over units, 300 resamples (seed 7)."
SHARE = {"n": 4, "useful": 0.5, "useful_ci": [0.1, 0.9], "unsure": 0.25, "unsure_ci": [0.0, 0.5],
         "not_useful": 0.25, "not_useful_ci": [0.0, 0.5]}
SIMILARITY = {"name": "tiny", "num_layers": 2, "paper_used": "roberta-large", "paper": None}


def _frame(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    return pd.DataFrame({"source": ["a", "b"] * (n // 2), "utility": rng.choice([-1, 0, 1], size=n),
                         "task_correct": rng.choice([0, 1], size=n), "gen_u": rng.choice([-1, 0, 1], size=n),
                         "similarity": rng.random(n)})


def test_gen_u_shares_and_generalization_csv_notes_name_their_bootstrap():
    results = {"bootstrap": BOOT, "gen_u": {"method": "Gen-U on validated questions"},
               "gen_u_shares": {"all": SHARE},
               "generalization": {"question_filter": "validated", "by_type": {
                   "paraphrase": {"n": 3, "accuracy_before": 0.5, "accuracy_after": 0.7, "accuracy_delta": 0.2,
                                  "accuracy_delta_ci": [0.0, 0.4]}}}}
    assert bootstrap_note(results) == NOTE
    gen_u_note = gen_u_share_rows(results)[0]["note"]
    assert gen_u_note.startswith("Gen-U on validated questions. ") and gen_u_note.endswith(NOTE)
    generalization = generalization_rows(results)[0]["note"]
    assert generalization.startswith("questions: validated. ") and generalization.endswith(NOTE)


@pytest.mark.django_db
def test_the_exported_gen_u_shares_csv_names_its_bootstrap(utility_study, tmp_path):
    run = _gen_u_run(utility_study)
    assert run.results.get("gen_u_shares")
    score_run_export(run=run, out_dir=tmp_path)
    with (tmp_path / "gen_u_shares.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(row["note"].endswith(bootstrap_note(run.results)) for row in rows)
    assert "resamples (seed " in rows[0]["note"]


def test_gen_u_and_similarity_sections_name_their_bootstrap():
    results = {"bootstrap": BOOT, "gen_u": {"method": "Gen-U on validated questions"}, "gen_u_shares": {"all": SHARE}}
    assert NOTE in gen_u_section(results).notes
    results = {"bootstrap": BOOT, "similarity": SIMILARITY, "correlation_ratio_utility_similarity": {"all": 0.1}}
    assert NOTE in similarity_section(results, _frame()).notes


def test_the_report_draws_theils_u_and_eta_intervals_with_the_runs_recorded_bootstrap():
    frame = _frame()
    results = {"bootstrap": BOOT, "similarity": SIMILARITY, "correlation_ratio_utility_similarity": {"all": 0.1},
               "theils_u_utility_given_task_accuracy": {"all": 0.01}}
    everything = frame
    section = similarity_section(results, frame)
    row = next(r for r in section.tables[0].rows if r["source"] == "all")
    ours = percentile_ci(correlation_ratio_draws(everything["utility"].to_numpy(),
                                                 everything["similarity"].to_numpy(float), n_resamples=300, seed=7), 0.9)
    default = percentile_ci(correlation_ratio_draws(everything["utility"].to_numpy(),
                                                    everything["similarity"].to_numpy(float)))
    assert [row["ci_low"], row["ci_high"]] == pytest.approx(ours) and ours != pytest.approx(default)
    assert section.tables[0].columns[3].label == "90% CI"

    section = theils_u_section(results, frame, both_directions=False)
    row = next(r for r in section.tables[0].rows if r["source"] == "all")
    xs, ys = frame["utility"].astype(int).to_numpy(), frame["task_correct"].astype(int).to_numpy()
    ours = percentile_ci(theils_u_draws(xs, ys, n_resamples=300, seed=7), 0.9)
    assert [row["ci_low"], row["ci_high"]] == pytest.approx(ours)
    assert ours != pytest.approx(percentile_ci(theils_u_draws(xs, ys)))
    assert NOTE in section.notes


def test_a_run_that_did_not_record_its_bootstrap_says_the_report_used_the_defaults():
    frame = _frame()
    results = {"similarity": SIMILARITY, "correlation_ratio_utility_similarity": {"all": 0.1},
               "theils_u_utility_given_task_accuracy": {"all": 0.01}}
    for section in (similarity_section(results, frame), theils_u_section(results, frame, both_directions=False)):
        said = " ".join(section.notes)
        assert "did not record its bootstrap settings" in said
        assert f"{DEFAULT_RESAMPLES:,} resamples (seed {DEFAULT_SEED})" in said
    row = next(r for r in similarity_section(results, frame).tables[0].rows if r["source"] == "all")
    assert [row["ci_low"], row["ci_high"]] == pytest.approx(percentile_ci(correlation_ratio_draws(
        frame["utility"].to_numpy(), frame["similarity"].to_numpy(float))))


def test_the_similarity_bin_row_of_associations_csv_names_its_bins_and_the_other_readings():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"source": ["a", "b"] * 20, "utility": rng.choice([-1, 0, 1], size=40),
                          "similarity": [0.1] * 24 + list(np.linspace(0.2, 0.9, 16))})  # ties: fewer than 5 bins
    out, _ = pipeline.associations(frame)
    binning = out["similarity_binning"]
    assert binning["bins_used"] < 5
    results = pipeline.clean_json({"similarity": SIMILARITY, **out})
    row = next(r for r in association_rows(results) if r["measure"] == "theils_u_utility_given_similarity_quintile")
    note = row["note"]
    assert note.startswith("BERTScore with tiny, layer 2")  # the model, as before
    assert pipeline.SIMILARITY_BINNING_RULE in note
    assert f"{binning['bins_used']} of 5 bins used (edges 0.1000, " in note
    assert f"named for the 5 bins asked (quintiles); {binning['bins_used']} were used" in note
    for q in (3, 10):
        u = binning["other_readings"][f"{q}_bins"]["theils_u"]["all"]
        assert f"{u:.4f} with {q} bins (" in note
    # the other measures' notes are unchanged
    eta = next(r for r in association_rows(results) if r["measure"] == "correlation_ratio_utility_similarity")
    assert "bins" not in eta["note"]
