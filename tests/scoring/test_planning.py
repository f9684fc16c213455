"""The study planner (issue 22, "how precise will this study be?") against a long simulation of the
scoring pipeline itself: 10,000 simulated studies whose worker answers (labels) go through
``scoring.metrics.pipeline.unit_outcomes`` (the majority vote and utility table that score real studies) and
an independently written McNemar test. The planner's figures must agree within 10%."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import binom

from scoring.metrics import majority_index, majority_vote, pipeline, planning

RUNS = 10_000


def pipeline_useful(priors, *, n_items: int, raters: int, runs: int, seed: int) -> dict[str, np.ndarray]:
    """``runs`` studies of ``n_items`` yes/no items x the sources in ``priors``: every worker's
    answer a label, scored by ``pipeline.unit_outcomes``; returns per source the (runs, n_items)
    utility."""
    rng = np.random.default_rng(seed)
    names = [p.name for p in priors]
    n_units = runs * n_items * len(priors)
    gold = rng.choice(np.array(["yes", "no"]), size=runs * n_items)
    units = pd.DataFrame({
        "unit_id": np.arange(n_units),
        "item_id": np.tile(np.arange(n_items), runs * len(priors)),
        "source": np.tile(np.repeat(names, n_items), runs),
        "gold": np.repeat(gold.reshape(runs, 1, n_items), len(priors), axis=1).reshape(-1),
    })
    frames = []
    gold_code = (units["gold"].to_numpy() == "yes").astype(np.int8)[:, None]  # labels: 0 "no", 1 "yes"
    for step, attr in (("before", "q_before"), ("after", "q_after")):
        rate = np.tile(np.repeat([getattr(p, attr) for p in priors], n_items), runs)
        right = rng.random((n_units, raters)) < rate[:, None]
        code = np.where(right, gold_code, 1 - gold_code).astype(np.int8)
        frames.append(pd.DataFrame({
            "unit_id": np.repeat(units["unit_id"].to_numpy(), raters),
            "participant_id": np.tile(np.arange(raters), n_units),
            "step": pd.Categorical.from_codes(np.zeros(code.size, dtype=np.int8), ["before", "after"]) if step
            == "before" else pd.Categorical.from_codes(np.ones(code.size, dtype=np.int8), ["before", "after"]),
            "answer": pd.Categorical.from_codes(code.reshape(-1), ["no", "yes"]),
        }))
    frame, _, _ = pipeline.unit_outcomes(units, pd.concat(frames, ignore_index=True), expected_raters=raters)
    frame = frame.sort_values("unit_id")
    utility = frame["utility"].to_numpy().reshape(runs, len(priors), n_items)
    return {name: utility[:, i, :] for i, name in enumerate(names)}


def mcnemar_power(x: np.ndarray, y: np.ndarray) -> float:
    """McNemar's exact test, written out: the smaller discordant count against Binomial(b + c, 1/2)."""
    b = (x & ~y).sum(axis=1)
    c = (~x & y).sum(axis=1)
    rejects = 0
    for bi, ci in zip(b, c, strict=True):
        n = bi + ci
        if n and min(1.0, 2 * binom.cdf(min(bi, ci), n, 0.5)) <= 0.05:
            rejects += 1
    return rejects / len(b)


def close(planned: float, simulated: float, tolerance: float = 0.10) -> bool:
    return abs(planned - simulated) <= tolerance * abs(simulated)


def test_majority_rule_on_counts_is_the_scoring_pipelines():
    """The planner's rule on vote counts (``majority_index``) and the scoring's majority per unit
    (``pipeline.majorities``) agree on every random vote, ties included."""
    rng = np.random.default_rng(3)
    labels = np.array(["a", "b", "c"])
    votes = rng.integers(0, 3, size=(3000, 4))
    annotations = pd.DataFrame({"unit_id": np.repeat(np.arange(3000), 4), "participant_id": 0, "step": "before",
                                "answer": labels[votes.reshape(-1)]})
    scored = pipeline.majorities(annotations, steps=["before"]).set_index("unit_id").sort_index()
    counts = np.stack([(votes == j).sum(axis=1) for j in range(3)], axis=1)
    index = majority_index(counts)
    expected = np.where(index >= 0, labels[np.maximum(index, 0)], None)
    assert list(scored["before_majority"]) == list(expected)
    assert [majority_vote(labels[row]) for row in votes[:200]] == list(expected[:200])
    assert (index < 0).sum() > 300  # ties were tested


def test_a_prior_reproduces_its_shares_through_the_vote():
    """The released study's per-worker rates, voted by five workers, give back its shares."""
    prior = planning.released_priors()["t5large"]
    utility = pipeline_useful([prior], n_items=458, raters=5, runs=400, seed=1)["t5large"]
    assert abs((utility == 1).mean() - 57 / 458) < 0.01
    assert abs((utility == -1).mean() - 189 / 458) < 0.01


def test_planner_matches_a_10000_run_simulation_of_the_scoring_pipeline():
    """Shares and 95% half-widths per source, with four workers per unit (a tie counts as wrong:
    the vote matters), within 10% of 10,000 studies scored by the pipeline."""
    priors = planning.released_priors()
    sources = (priors["t5large"], priors["gpt3"])
    planned = planning.precision(sources, priors["all"], n_items=30, raters=4, choices=2)
    simulated = pipeline_useful(sources, n_items=30, raters=4, runs=RUNS, seed=7)
    for row in planned.sources:
        utility = simulated[row.name]
        useful, not_useful = (utility == 1).mean(axis=1), (utility == -1).mean(axis=1)
        assert close(row.useful, useful.mean()), (row, useful.mean())
        assert close(row.not_useful, not_useful.mean()), (row, not_useful.mean())
        for planned_hw, shares in ((row.useful_half_width, useful), (row.not_useful_half_width, not_useful)):
            lo, hi = np.percentile(shares, [2.5, 97.5])
            assert close(planned_hw, 1.959964 * shares.std(ddof=1)), (row, shares.std())
            # and it is the study's interval width: the spread of the middle 95% of the shares
            assert close(planned_hw, (hi - lo) / 2, tolerance=0.2), (row, lo, hi)


def test_detectable_difference_and_items_needed_have_80_percent_power_in_the_pipeline():
    """At the planner's smallest detectable difference (and at its item count for an entered
    difference), 10,000 pipeline-scored paired studies reject in 80% of runs, within 10%."""
    # A pilot's shares (20% useful, 10% unsure, 70% not useful with three workers per unit): a
    # large difference is possible, so a small design (fast to score 10,000 times) can detect it.
    prior = planning.SourcePrior.from_shares("pilot", 0.2, 0.1, raters=3, choices=2)
    n_items, raters = 30, 3
    planned = planning.precision((), prior, n_items=n_items, raters=raters, choices=2, difference=0.3)
    assert planned.detectable_difference is not None
    assert 0.3 < planned.detectable_difference < planning.max_difference(prior, raters, 2)
    assert planned.items_needed is not None and planned.items_needed > n_items
    for d, n in ((planned.detectable_difference, n_items), (0.3, planned.items_needed)):
        q_after = planning._useful_after_rate(prior, d, raters, 2)
        better = planning.SourcePrior("better", prior.q_before, q_after)
        simulated = pipeline_useful([prior, better], n_items=n, raters=raters, runs=RUNS, seed=11)
        observed = mcnemar_power(simulated[prior.name] == 1, simulated["better"] == 1)
        assert close(planning.POWER, observed), (d, n, observed)
        # and the difference is what it says: the second source's useful share is higher by d
        diff = (simulated["better"] == 1).mean() - (simulated[prior.name] == 1).mean()
        assert abs(diff - d) < 0.1 * d, (diff, d)


def test_planner_is_fast_and_seedable():
    import time

    priors = planning.released_priors()
    sources = (priors["t5large"], priors["t53b"], priors["gpt3"])
    start = time.perf_counter()
    first = planning.precision(sources, priors["all"], n_items=458, raters=5, choices=2, seed=123)
    assert time.perf_counter() - start < 5  # a page's budget on a loaded test machine (about 0.4 s alone)
    planning.precision.cache_clear()
    assert planning.precision(sources, priors["all"], n_items=458, raters=5, choices=2, seed=123) == first


def test_majority_probability_and_simulated_votes_agree_with_every_vote_pattern():
    """Four choices, four workers: the exact majority-right probability the prior is fitted with
    equals the sum over all 4^4 vote patterns scored by ``majority_vote``, and the simulated votes
    (right votes, then wrong ones spread over the three wrong labels) are right that often."""
    import itertools

    q, raters, choices = 0.45, 4, 4
    wrong = (1 - q) / (choices - 1)
    brute = sum(
        np.prod([q if v == "a" else wrong for v in votes])
        for votes in itertools.product("abcd", repeat=raters) if majority_vote(votes) == "a"
    )
    assert abs(planning.p_majority_right(q, raters, choices) - brute) < 1e-12
    rng = np.random.default_rng(5)
    simulated = planning._right(rng.random(200_000), q, raters, choices, rng).mean()
    assert abs(simulated - brute) < 0.005
    assert abs(planning.worker_rate(brute, raters, choices) - q) < 1e-9


# --- the planner's four audited problems ------------------------------------------------------------

def _mixture_shares(prior, workers, choices):
    """Exact (useful, unsure) of ``prior`` over units with the given ((workers, units), ...)."""
    total = sum(n for _, n in workers)
    useful = unsure = 0.0
    for r, n in workers:
        before = planning.p_majority_right(prior.q_before, r, choices)
        after = planning.p_majority_right(prior.q_after, r, choices)
        useful += n / total * (1 - before) * after
        unsure += n / total * before * after
    return useful, unsure


def test_a_pilot_short_of_workers_is_fitted_to_the_workers_its_units_had():
    """A pilot asked for five workers, whose units had 2, 3 or 5 (40 units each): the fitted rates
    give back its shares under those counts, and a five-worker design planned from them differs from
    one planned as if every pilot unit had had all five."""
    workers = ((2, 40), (3, 40), (5, 40))
    prior = planning.SourcePrior.from_shares("pilot", 0.30, 0.45, raters=workers, choices=2)
    useful, unsure = _mixture_shares(prior, workers, 2)
    assert abs(useful - 0.30) < 1e-6 and abs(unsure - 0.45) < 1e-6
    assumed = planning.SourcePrior.from_shares("pilot", 0.30, 0.45, raters=5, choices=2)
    assert abs(_mixture_shares(assumed, workers, 2)[1] - 0.45) > 0.05  # the assumed fit does not reproduce them
    assert planning.expected_shares(assumed, 5, 2)[1] - planning.expected_shares(prior, 5, 2)[1] > 0.1
    # and pipeline-scored units with those counts agree with the fit
    simulated = [pipeline_useful([prior], n_items=n, raters=r, runs=200, seed=r)["pilot"] for r, n in workers]
    units = np.concatenate([u.ravel() for u in simulated])
    assert abs((units == 1).mean() - 0.30) < 0.01 and abs((units == 0).mean() - 0.45) < 0.01


def test_more_than_six_choices_are_simulated_as_they_are():
    """Eight answer choices: the probability the prior is fitted with matches every vote pattern of
    four workers scored by ``majority_vote``, and the planner simulates eight, not six."""
    import itertools

    q, raters, choices = 0.4, 4, 8
    labels = "abcdefgh"
    wrong = (1 - q) / (choices - 1)
    brute = sum(np.prod([q if v == "a" else wrong for v in votes])
                for votes in itertools.product(labels, repeat=raters) if majority_vote(votes) == "a")
    assert abs(planning.p_majority_right(q, raters, choices) - brute) < 1e-12
    prior = planning.SourcePrior("s", 0.3, 0.4)
    planned = planning.precision((prior,), prior, n_items=100, raters=5, choices=choices)
    assert planned.choices == choices
    useful, not_useful = planning.expected_shares(prior, 5, choices)
    assert abs(planned.sources[0].useful - useful) < 0.005
    assert abs(planned.sources[0].not_useful - not_useful) < 0.005
    six = planning.expected_shares(prior, 5, 6)
    assert abs(six[1] - not_useful) > 0.03  # six choices would give other figures


def test_the_rule_table_enumerated_and_counted_agree(monkeypatch):
    """``_rule_table`` enumerates the wrong votes through the rule's own function, and counts them
    past ``ENUMERATE_MAX_WAYS``: both give the same table for both readings."""
    for raters, choices in ((5, 4), (4, 3), (7, 9), (6, 2)):
        enumerated = {rule: planning._rule_table(raters, choices, rule) for rule in planning.MAJORITY_RULES}
        planning._rule_table.cache_clear()
        monkeypatch.setattr(planning, "ENUMERATE_MAX_WAYS", 0)
        for rule, table in enumerated.items():
            assert np.allclose(planning._rule_table(raters, choices, rule), table, atol=1e-12), (raters, choices, rule)
        monkeypatch.undo()
        planning._rule_table.cache_clear()
    planning.precision((), planning.released_priors()["all"], n_items=10, raters=25, choices=40)  # large: counted


def test_multiple_choice_figures_name_the_rule_and_give_the_strict_reading_too():
    """Four choices, five workers: the figures use the plurality (scoring's default reading) and the
    same simulated answers read by the strict majority give the other reading's shares, each equal
    to the exact expected share under that rule; with two choices the readings coincide."""
    prior = planning.SourcePrior("s", 0.35, 0.55)
    planned = planning.precision((prior,), prior, n_items=200, raters=5, choices=4)
    assert (planned.rule, planned.other_rule) == ("plurality", "strict_majority")
    (row,), (other,) = planned.sources, planned.other_sources
    for got, rule in ((row, "plurality"), (other, "strict_majority")):
        useful, not_useful = planning.expected_shares(prior, 5, 4, rule)
        assert abs(got.useful - useful) < 0.004 and abs(got.not_useful - not_useful) < 0.004, (rule, got)
    assert other.not_useful - row.not_useful > 0.03  # the strict reading finds fewer right majorities
    # and the readings agree with the pipeline's two readings of the same rule on labels
    votes = np.array([[2, 1, 1, 1], [3, 1, 1, 0], [2, 2, 1, 0]])
    assert list(majority_index(votes)) == [0, 0, -1]
    assert list(planning._RULE_INDEX["strict_majority"](votes)) == [-1, 0, -1]
    assert planning.precision((prior,), prior, n_items=50, raters=5, choices=2).other_sources == ()


def test_a_large_design_runs_bounded_simulations_in_bounded_memory():
    """10,000 items: at most ``MAX_UNIT_SIMS`` simulated units per source (200 studies, said in the
    result), drawn in chunks, so the peak memory stays small (no time is asserted here)."""
    import tracemalloc

    priors = planning.released_priors()
    planning.precision.cache_clear()
    tracemalloc.start()
    try:
        planned = planning.precision((priors["t5large"], priors["gpt3"]), priors["all"], n_items=10_000, raters=5,
                                     choices=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (planned.n_sims, planned.n_sims_asked) == (200, 2000)
    assert planned.n_sims * planned.n_items <= planning.MAX_UNIT_SIMS
    assert peak < 200e6, peak
    assert abs(planned.sources[0].useful - 57 / 458) < 0.005
    # a design of the paper's size keeps its 2,000 studies
    assert planning.sims_used(2000, 458) == 2000
