"""Each metric against an independent reference: hand-worked cases, dython, krippendorff,
statsmodels, exact integer arithmetic and brute-force enumeration."""
from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from dython.nominal import correlation_ratio as dython_eta
from dython.nominal import theils_u as dython_u
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

from scoring.metrics import (
    bootstrap_ci,
    comprehensiveness,
    consistency,
    consistent_bundle_count,
    correlation_ratio,
    fleiss_kappa,
    gen_u,
    krippendorff_alpha,
    majority_vote,
    pipeline,
    relative_consistency,
    share_cis,
    sufficiency,
    theils_u,
    utility_category,
)

# --- majority vote, utility, Gen-U ------------------------------------------------------------


def test_majority_vote_returns_label_with_most_votes():
    assert majority_vote(["yes", "no", "yes", "yes", "no"]) == "yes"
    assert majority_vote(["c", "a", "c", "b", "d"]) == "c"


def test_majority_vote_tie_is_none():
    assert majority_vote(["yes", "no"]) is None
    assert majority_vote(["a", "b", "a", "b", "c"]) is None
    assert majority_vote([]) is None


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [(False, True, 1), (True, True, 0), (True, False, -1), (False, False, -1)],
)
def test_utility_category_follows_spec_table(before, after, expected):
    assert utility_category(before, after) == expected


def test_vectorised_utility_agrees_with_the_table_on_every_before_after_tie_combination():
    """``pipeline.add_utility`` (the pipeline's) is derived from ``utility_category`` (the table):
    every combination of a right, wrong or tied (no majority) answer before and after gives the
    same category, a tie counted as wrong."""
    outcomes = {"right": "yes", "wrong": "no", "tie": None}
    combos = list(itertools.product(outcomes, repeat=2))
    frame = pd.DataFrame({
        "gold": ["yes"] * len(combos),
        "before_majority": [outcomes[b] for b, _ in combos],
        "after_majority": [outcomes[a] for _, a in combos],
    })
    got = pipeline.add_utility(frame)["utility"].tolist()
    expected = [utility_category(b == "right", a == "right") for b, a in combos]
    assert got == expected
    assert sorted(set(got)) == [-1, 0, 1]  # every category is reached
    # The same for multiple-choice labels and a frame whose majorities are all missing.
    mc = pd.DataFrame({"gold": ["c", "c"], "before_majority": ["a", "c"], "after_majority": ["c", None]})
    assert pipeline.add_utility(mc)["utility"].tolist() == [utility_category(False, True), utility_category(True, False)]


def test_utility_recomputed_from_released_labels_matches_every_row(strategyqa_dir):
    rows = [json.loads(line) for line in (strategyqa_dir / "rationale_utility.json").read_text().splitlines() if line.strip()]
    assert len(rows) == 1374
    mismatches = [
        i for i, r in enumerate(rows)
        if utility_category(
            r["human_predicted_label_before_rationale"] == r["ground_truth_label"],
            r["human_predicted_label_after_rationale"] == r["ground_truth_label"],
        ) != r["rationale_utility"]
    ]
    assert mismatches == []


def test_gen_u_hand_worked():
    # s = [+1 (I wrong, IR right), 0 (both right), -1 (IR wrong), +1] -> mode +1
    assert gen_u([False, True, True, False], [True, True, False, True]) == 1
    # s = [+1, 0] -> tie between +1 and 0 -> the lowest: 0
    assert gen_u([False, True], [True, True]) == 0
    # s = [-1, +1] -> tie -> -1
    assert gen_u([True, False], [False, True]) == -1


def test_gen_u_rejects_empty_and_unequal_inputs():
    with pytest.raises(ValueError, match="no generalization questions"):
        gen_u([], [])
    with pytest.raises(ValueError, match="after_correct has 1"):
        gen_u([True, False], [True])


# --- Theil's U and the correlation ratio against dython ----------------------------------------


def test_theils_u_hand_worked():
    # y determines x exactly -> 1; x independent of y -> 0.
    assert theils_u([0, 0, 1, 1], ["a", "a", "b", "b"]) == pytest.approx(1.0)
    assert theils_u([0, 1, 0, 1], ["a", "a", "b", "b"]) == pytest.approx(0.0)
    # constant x: the dython convention.
    assert theils_u([1, 1, 1], [0, 1, 0]) == 1.0


@pytest.mark.parametrize("seed", range(8))
def test_theils_u_matches_dython(seed):
    rng = np.random.default_rng(seed)
    x = rng.choice([-1, 0, 1], size=300, p=[0.5, 0.3, 0.2])
    y = np.where(rng.random(300) < 0.6, x > 0, rng.random(300) < 0.5)
    assert theils_u(x, y) == pytest.approx(dython_u(x, y), abs=1e-12)
    assert theils_u(y, x) == pytest.approx(dython_u(y, x), abs=1e-12)


def test_correlation_ratio_hand_worked():
    # two groups {1, 3} and {5, 7}: means 2 and 6, grand mean 4; between = 2*4 + 2*4 = 16;
    # total = 9 + 1 + 1 + 9 = 20 -> eta = sqrt(0.8)
    assert correlation_ratio(["a", "a", "b", "b"], [1, 3, 5, 7]) == pytest.approx(math.sqrt(0.8))
    assert correlation_ratio(["a", "b"], [2.0, 2.0]) == 0.0


def test_correlation_ratio_is_zero_when_the_measurements_are_all_equal_whatever_rounding_leaves():
    # 0.1 is not exact in binary: the sums of squares come out as rounding noise rather than 0, and
    # their ratio gave 1.0 and 1.89 (outside [0, 1]) before the no-spread rule.
    assert correlation_ratio([1, 0, 1], [0.1] * 3) == 0.0
    assert correlation_ratio([1, -1, 1, -1, 1, -1, 0], [0.1] * 7) == 0.0
    assert correlation_ratio(["a", "b", "c"], [1e300] * 3) == 0.0
    frame = pd.DataFrame({"source": ["gpt3"] * 7, "utility": [1, -1, 1, -1, 1, -1, 0], "similarity": [0.1] * 7})
    published, _ = pipeline.associations(frame)
    assert published["correlation_ratio_utility_similarity"] == {"gpt3": 0.0, "all": 0.0}


@pytest.mark.parametrize("seed", range(20))
def test_correlation_ratio_stays_in_the_unit_interval_for_values_an_ulp_apart(seed):
    rng = np.random.default_rng(seed)
    base = rng.uniform(-1e6, 1e6)
    values = base + rng.integers(0, 3, 40) * np.spacing(base)
    assert 0.0 <= correlation_ratio(rng.integers(0, 4, 40), values) <= 1.0


@pytest.mark.parametrize("seed", range(8))
def test_correlation_ratio_matches_dython(seed):
    rng = np.random.default_rng(seed)
    cats = rng.choice([-1, 0, 1], size=400)
    meas = rng.normal(size=400) + 0.3 * cats
    assert correlation_ratio(cats, meas) == pytest.approx(dython_eta(cats, meas), abs=1e-12)


# --- consistency and relative consistency ---------------------------------------------------


def test_consistency_hand_worked():
    correct = [True, True, True, False, False, False, True, True]
    bundles = ["a", "a", "b", "b", "c", "c", "d", "d"]
    assert consistency(correct, bundles) == 0.5
    assert consistent_bundle_count(correct, bundles) == (4, 5, 2)


def test_bundle_consistency_names_the_bundles_rc_is_computed_on_and_gives_every_size():
    """With bundles of different sizes RC is computed on one size: the most common, and between
    sizes equally common the largest, whatever order the bundles come in; the subset's accuracy
    and consistency are given with it, and every size's figures."""
    # two bundles of size 2 listed first (a consistent, b not), two of size 3 (c consistent, d not)
    correct = [True, True, True, False, True, True, True, False, True, True]
    bundles = ["a", "a", "b", "b", "c", "c", "c", "d", "d", "d"]
    out = pipeline.bundle_consistency(pd.Series(correct), pd.Series(bundles))
    assert (out["n_bundles"], out["accuracy"], out["consistency"]) == (4, 0.8, 0.5)
    assert (out["rc_bundle_size"], out["rc_n_bundles"], out["rc_accuracy"], out["rc_consistency"]) == (
        3, 2, pytest.approx(5 / 6), 0.5)
    assert out["relative_consistency"] == pytest.approx(relative_consistency(2, 5, 1, bundle_size=3))
    assert out["rc_size_rule"] == pipeline.RC_SIZE_RULE and "the largest" in out["rc_size_rule"]
    assert out["rc_by_bundle_size"] == {
        "2": {"n_bundles": 2, "accuracy": 0.75, "consistency": 0.5,
              "relative_consistency": pytest.approx(relative_consistency(2, 3, 1))},
        "3": {"n_bundles": 2, "accuracy": pytest.approx(5 / 6), "consistency": 0.5,
              "relative_consistency": out["relative_consistency"]}}
    assert "accuracy 0.833, consistency 0.500 there" in out["rc_note"]
    reordered = pipeline.bundle_consistency(pd.Series(correct[::-1]), pd.Series(bundles[::-1]))
    assert reordered["rc_bundle_size"] == 3


def exact_rc_size2(n: int, a: int, c: int) -> Fraction:
    def m(i):
        if not (max(0, a - n) <= i <= a // 2):
            return 0
        return math.comb(n, i) * math.comb(n - i, a - 2 * i) * 2 ** (a - 2 * i)

    return Fraction(sum(m(i) for i in range(0, c + 1)), math.comb(2 * n, a))


def test_rc_matches_exact_integer_form_for_small_n():
    checked = 0
    for n in range(1, 25):
        for a in range(0, 2 * n + 1):
            for c in range(max(0, a - n), a // 2 + 1):
                expected = float(exact_rc_size2(n, a, c))
                assert relative_consistency(n, a, c) == pytest.approx(expected, rel=1e-9, abs=1e-12), (n, a, c)
                checked += 1
    assert checked == 2924


def test_rc_is_one_at_largest_feasible_consistency():
    assert relative_consistency(1000, 1200, 600) == 1.0
    assert relative_consistency(10, 30, 10, bundle_size=3) == 1.0


def brute_force_rc(n: int, k: int, a: int, c: int) -> Fraction:
    total = 0
    at_most_c = 0
    for chosen in itertools.combinations(range(k * n), a):
        full = [0] * n
        for pos in chosen:
            full[pos // k] += 1
        consistent = sum(1 for f in full if f == k)
        total += 1
        at_most_c += consistent <= c
    return Fraction(at_most_c, total)


def test_rc_bundle_size_3_matches_brute_force_enumeration():
    checked = 0
    for n in (1, 2, 3, 4):
        for a in range(0, 3 * n + 1):
            for c in range(max(0, a - 2 * n), a // 3 + 1):
                expected = float(brute_force_rc(n, 3, a, c))
                assert relative_consistency(n, a, c, bundle_size=3) == pytest.approx(expected, rel=1e-12), (n, a, c)
                checked += 1
    assert checked > 30


def test_rc_general_k_path_agrees_with_size2_closed_form():
    from scoring.metrics import contrast as mod

    for n, a in [(7, 6), (30, 41), (200, 250)]:
        closed = mod.log_m(n, a, 2)
        # Same quantity through the polynomial-power programme used for k >= 3.
        log_q = mod._log_poly_power_coefficients(n, a, 2)
        i = np.arange(max(0, a - n), a // 2 + 1)
        general = mod._log_comb(n, i) + np.array([log_q[n - ii] for ii in i])
        np.testing.assert_allclose(closed[i], general, rtol=1e-10)


def test_rc_large_n_is_fast_and_sane():
    import time

    start = time.perf_counter()
    value = relative_consistency(100_000, 120_000, 36_000)
    assert time.perf_counter() - start < 0.5
    assert 0.0 <= value <= 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 21, 0), "n_correct=21 is impossible"),
        ((10, -1, 0), "n_correct=-1 is impossible"),
        ((10, 15, 8), r"n_consistent=8 is impossible .* \[5, 7\]"),
        ((10, 15, 4), r"n_consistent=4 is impossible"),
        ((0, 0, 0), "n_bundles must be at least 1"),
        ((10, 5, 1.5), "n_consistent must be an integer"),
    ],
)
def test_rc_rejects_infeasible_inputs(args, message):
    with pytest.raises(ValueError, match=message):
        relative_consistency(*args)


def test_rc_rejects_bad_bundle_size():
    with pytest.raises(ValueError, match="bundle_size must be at least 1"):
        relative_consistency(3, 1, 0, bundle_size=0)


# --- faithfulness -----------------------------------------------------------------------------


def test_sufficiency_and_comprehensiveness_hand_worked():
    assert sufficiency([0.9, 0.8], [0.7, 0.9]) == pytest.approx((0.2 - 0.1) / 2)
    assert comprehensiveness([0.9, 0.8], [0.3, 0.4]) == pytest.approx((0.6 + 0.4) / 2)


def test_faithfulness_rejects_bad_probabilities():
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        sufficiency([1.2], [0.5])
    with pytest.raises(ValueError, match="p_full has 2 values"):
        comprehensiveness([0.1, 0.2], [0.1])


# --- agreement ------------------------------------------------------------------------------


def test_krippendorff_alpha_matches_reliability_data_form():
    import krippendorff

    # Krippendorff's own nominal example (4 coders x 12 units, with gaps), as raters x units.
    nan = np.nan
    data = np.array([
        [1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
        [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan],
    ])
    units, labels = [], []
    for r in range(data.shape[0]):
        for u in range(data.shape[1]):
            if not np.isnan(data[r, u]):
                units.append(u)
                labels.append(int(data[r, u]))
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert krippendorff_alpha(units, labels) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.743, abs=1e-3)  # the published value of this example


def test_fleiss_kappa_matches_statsmodels_and_wikipedia_example():
    # Wikipedia's Fleiss kappa example: 10 subjects x 5 categories, 14 raters; kappa = 0.210.
    table = np.array([
        [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
    ])
    units, labels = [], []
    for u, row in enumerate(table):
        for cat, count in enumerate(row):
            units += [u] * int(count)
            labels += [f"c{cat}"] * int(count)
    assert fleiss_kappa(units, labels) == pytest.approx(sm_fleiss(table), abs=1e-12)
    assert fleiss_kappa(units, labels) == pytest.approx(0.210, abs=1e-3)


def test_fleiss_kappa_rejects_unequal_raters():
    with pytest.raises(ValueError, match=r"same number of raters .*\[1, 2\]"):
        fleiss_kappa([1, 1, 2], ["yes", "no", "yes"])


# --- bootstrap ------------------------------------------------------------------------------


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    values = np.random.default_rng(1).normal(10, 2, size=200)
    lo, hi = bootstrap_ci(values)
    assert lo < values.mean() < hi
    assert (lo, hi) == bootstrap_ci(values)
    # Normal-theory interval for comparison: half-width ~ 1.96 * sd / sqrt(n).
    assert (hi - lo) / 2 == pytest.approx(1.96 * values.std(ddof=1) / math.sqrt(200), rel=0.15)


def test_share_cis_agree_with_row_resampling():
    labels = [1] * 30 + [0] * 50 + [-1] * 120
    shares = share_cis(labels, [1, 0, -1], n_resamples=4000)
    assert shares[1][0] == pytest.approx(0.15)
    # Row-resampling percentile interval computed directly.
    rng = np.random.default_rng(3)
    arr = np.array(labels)
    boot = (arr[rng.integers(0, arr.size, size=(4000, arr.size))] == 1).mean(axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert shares[1][1] == pytest.approx(lo, abs=0.015)
    assert shares[1][2] == pytest.approx(hi, abs=0.015)
