"""How precise will a study be? The study planner's simulation (pure numpy, no Django).

A design is ``n_items`` items, each shown with every source's rationale to ``raters`` workers per
unit, who answer one of ``choices`` labels before and after reading the rationale. The study scores
a unit by majority vote (a tie counts as wrong) and the utility table (SPEC section 2). The planner
simulates exactly that: each worker answers right with a per-worker probability (``q_before``,
``q_after``, per source) and otherwise picks one of the wrong labels at random; the votes go through
:func:`scoring.metrics.labels.majority_index` (the tie rule's one owner) and
:func:`scoring.metrics.labels.utility_category` (the utility table's one owner), then the shares
are taken over the items, once per simulated study.

The prior (what the shares are expected to be) is given as shares of useful / unsure / not useful
observed with some number of raters (the released study's, or a scored pilot's). It is turned into
per-worker rates by inverting the majority-vote probability (computed exactly from the same rule by
enumerating every way the votes can fall): after-correct = useful + unsure, before-correct =
unsure / (useful + unsure); the before and after answers of a unit are taken as independent, which
reproduces the three shares exactly. Units are independent: no item effect shared by the sources
(a positive one would make the paired test below more powerful, so the detectable difference is on
the cautious side).

Figures:
- half-width of the 95% interval of a source's useful (not useful) share: 1.96 standard deviations of
  that share over the simulated studies (the spread the study's own interval estimates; percentiles
  of a share of a few dozen items are too coarse to compare);
- smallest detectable difference: a second source whose useful share is higher by ``d`` (its
  after-correct rate raised, its before-correct rate kept), both on the same items; McNemar's exact
  test (two-sided, 5%) on the items where exactly one source is useful; ``d`` is the smallest
  difference rejected in at least 80% of the simulated studies (bisection with common random
  numbers);
- items needed for an entered difference: the fewest items with 80% power, by bisection over the
  item count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import binom

from scoring.metrics.labels import majority_index, utility_category
from studies.majority import remaining_ways

ALPHA = 0.05
POWER = 0.80
MAX_ITEMS = 5000
MAX_RATERS = 25
MAX_CHOICES = 6
# The utility table, read from its one definition: ``_TABLE[before_correct, after_correct]``.
_TABLE = np.array([[utility_category(bool(b), bool(a)) for a in (0, 1)] for b in (0, 1)], dtype=np.int8)

# The released StrategyQA human-utility outcomes (Joshi et al. 2023):
# /work/shared/data/strategyqa/rationale_utility.json, 458 test questions per model, each outcome the
# majority of five crowdworkers on yes/no questions. Counts of (useful, unsure, not useful), counted
# once from that file's ``rationale_source`` and ``rationale_utility`` fields.
RELEASED_COUNTS = {
    "t5large": (57, 212, 189),
    "t53b": (71, 214, 173),
    "gpt3": (66, 239, 153),
    "all": (194, 665, 515),
}
RELEASED_RATERS = 5
RELEASED_CHOICES = 2


@lru_cache(maxsize=64)
def _vote_table(raters: int, choices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every way ``raters`` votes fall on ``choices`` labels (label 0 the right one): the number of
    right votes, the log multinomial coefficient, and whether the majority rule picks the right one."""
    vectors = remaining_ways(raters, choices)
    log_coef = math.lgamma(raters + 1) - np.array([sum(math.lgamma(v + 1) for v in row) for row in vectors])
    right = majority_index(vectors) == 0
    return vectors[:, 0], log_coef, right


def p_majority_right(q: float, raters: int, choices: int) -> float:
    """P(the majority of ``raters`` workers is right) when each is right with probability ``q`` and
    otherwise picks a wrong label at random: exact, by the majority rule on every vote count."""
    right_votes, log_coef, right = _vote_table(raters, choices)
    if q <= 0:
        return 0.0
    if q >= 1:
        return 1.0
    wrong = (1 - q) / (choices - 1)
    logp = log_coef + right_votes * math.log(q) + (raters - right_votes) * math.log(wrong)
    return float(np.exp(logp[right]).sum())


def worker_rate(p_majority: float, raters: int, choices: int) -> float:
    """The per-worker rate whose majority is right with probability ``p_majority`` (bisection)."""
    p_majority = min(max(p_majority, 0.0), 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if p_majority_right(mid, raters, choices) < p_majority:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class SourcePrior:
    """A source's expected per-worker rates of answering right, before and after its rationale."""

    name: str
    q_before: float
    q_after: float

    @classmethod
    def from_shares(cls, name: str, useful: float, unsure: float, *, raters: int, choices: int) -> SourcePrior:
        after = useful + unsure
        before = unsure / after if after > 0 else 0.0
        return cls(name, worker_rate(before, raters, choices), worker_rate(after, raters, choices))


def released_priors() -> dict[str, SourcePrior]:
    out = {}
    for name, (useful, unsure, not_useful) in RELEASED_COUNTS.items():
        n = useful + unsure + not_useful
        out[name] = SourcePrior.from_shares(name, useful / n, unsure / n, raters=RELEASED_RATERS,
                                            choices=RELEASED_CHOICES)
    return out


def _right(uniform: np.ndarray, q: float, raters: int, choices: int, rng: np.random.Generator) -> np.ndarray:
    """Simulated majority-is-right per unit: right votes by inverting the binomial CDF at
    ``uniform`` (common random numbers), wrong votes spread at random over the wrong labels, then
    the majority rule."""
    cdf = binom.cdf(np.arange(raters + 1), raters, q)
    right_votes = np.minimum(np.searchsorted(cdf, uniform, side="right"), raters)
    if choices == 2:
        # Two labels: the rule's answer for each possible count of right votes, looked up per unit.
        votes = np.arange(raters + 1)
        return (majority_index(np.stack([votes, raters - votes], axis=-1)) == 0)[right_votes]
    wrong = rng.multinomial(raters - right_votes, [1 / (choices - 1)] * (choices - 1)).astype(np.int16)
    counts = np.concatenate([right_votes[None].astype(np.int16), np.moveaxis(wrong, -1, 0)], axis=0)
    return majority_index(counts, axis=0) == 0


def simulate_utility(prior: SourcePrior, *, n_items: int, raters: int, choices: int, n_sims: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Utility (-1/0/+1) of each unit of one source in ``n_sims`` simulated studies: (n_sims, n_items)."""
    before = _right(rng.random((n_sims, n_items)), prior.q_before, raters, choices, rng)
    after = _right(rng.random((n_sims, n_items)), prior.q_after, raters, choices, rng)
    return _TABLE[before.astype(np.intp), after.astype(np.intp)]


def half_width(shares: np.ndarray) -> float:
    """The expected 95% interval half-width of a share: 1.96 standard deviations over the studies."""
    return float(1.959964 * np.std(shares, ddof=1))


def mcnemar_rejects(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """McNemar's exact test (two-sided, ``ALPHA``) of paired booleans, one test per row."""
    b = (x & ~y).sum(axis=-1)
    c = (~x & y).sum(axis=-1)
    n = b + c
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(b, c), n, 0.5))
    return (n > 0) & (p <= ALPHA)


def _useful_after_rate(prior: SourcePrior, difference: float, raters: int, choices: int) -> float | None:
    """The after-rate of a source like ``prior`` whose useful share is higher by ``difference``
    (None when no after-rate can reach it)."""
    before = p_majority_right(prior.q_before, raters, choices)
    useful = (1 - before) * p_majority_right(prior.q_after, raters, choices)
    if before >= 1 or useful + difference > (1 - before) + 1e-12:
        return None
    return worker_rate((useful + difference) / (1 - before), raters, choices)


def max_difference(prior: SourcePrior, raters: int, choices: int) -> float:
    before = p_majority_right(prior.q_before, raters, choices)
    return max(0.0, (1 - before) * (1 - p_majority_right(prior.q_after, raters, choices)))


class _Paired:
    """One batch of simulated paired studies: ``prior``'s source and a second source with the same
    before-rate, on the same items. Everything but the second source's after-votes is drawn once, so
    the power at different differences uses common random numbers (and is monotone in them)."""

    def __init__(self, prior: SourcePrior, *, n_items: int, raters: int, choices: int, n_sims: int, seed: int):
        self.prior, self.raters, self.choices = prior, raters, choices
        self.rng = np.random.default_rng(seed)
        self.x = simulate_utility(prior, n_items=n_items, raters=raters, choices=choices, n_sims=n_sims,
                                  rng=self.rng) == 1
        self.before = _right(self.rng.random((n_sims, n_items)), prior.q_before, raters, choices, self.rng)
        self.after_uniform = self.rng.random((n_sims, n_items))
        self.seed = seed

    def power(self, difference: float) -> float:
        q_after = _useful_after_rate(self.prior, difference, self.raters, self.choices)
        if q_after is None:
            return float("nan")
        rng = np.random.default_rng(self.seed + 1)  # the wrong labels' spread, the same at each difference
        after = _right(self.after_uniform, q_after, self.raters, self.choices, rng)
        y = _TABLE[self.before.astype(np.intp), after.astype(np.intp)] == 1
        return float(mcnemar_rejects(self.x, y).mean())


def power(prior: SourcePrior, difference: float, *, n_items: int, raters: int, choices: int, n_sims: int,
          seed: int) -> float:
    """Share of simulated studies in which McNemar's test tells ``prior``'s source from one whose
    useful share is higher by ``difference``, both rated on the same ``n_items`` items."""
    return _Paired(prior, n_items=n_items, raters=raters, choices=choices, n_sims=n_sims, seed=seed).power(difference)


def smallest_detectable_difference(prior: SourcePrior, *, n_items: int, raters: int, choices: int, n_sims: int,
                                   seed: int) -> float | None:
    """The smallest rise in useful share detected with ``POWER`` (None: not even the largest possible)."""
    top = max_difference(prior, raters, choices)
    sim = _Paired(prior, n_items=n_items, raters=raters, choices=choices, n_sims=n_sims, seed=seed)
    if top <= 0 or not sim.power(top) >= POWER:
        return None
    lo, hi = 0.0, top
    while hi - lo > 0.002:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if sim.power(mid) >= POWER else (mid, hi)
    return hi


def items_needed(prior: SourcePrior, difference: float, *, raters: int, choices: int, n_sims: int,
                 seed: int) -> int | None:
    """The fewest items that detect ``difference`` with ``POWER`` (None: more than ``MAX_ITEMS``).
    Each item count is simulated with the same seed, so the first items of every batch agree."""
    def ok(n: int) -> bool:
        return power(prior, difference, n_items=n, raters=raters, choices=choices, n_sims=n_sims, seed=seed) >= POWER

    if _useful_after_rate(prior, difference, raters, choices) is None:
        return None
    lo, hi = 1, 8  # doubling, then bisection: the large batches are simulated only when needed
    while not ok(hi):
        if hi >= MAX_ITEMS:
            return None
        lo, hi = hi, min(2 * hi, MAX_ITEMS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class SourcePrecision:
    name: str
    useful: float
    not_useful: float
    useful_half_width: float
    not_useful_half_width: float


@dataclass(frozen=True)
class Precision:
    n_items: int
    raters: int
    choices: int
    n_sims: int
    seed: int
    sources: tuple[SourcePrecision, ...]
    baseline: str
    detectable_difference: float | None
    difference: float | None = None
    items_needed: int | None = None
    items_needed_sims: int | None = None  # the simulated studies per candidate size of that search


# The search for the items needed simulates a study per candidate size many times over: it runs at
# most this many simulated studies per size (the method line says how many it used).
ITEMS_NEEDED_MAX_SIMS = 1000


@lru_cache(maxsize=256)
def precision(priors: tuple[SourcePrior, ...], baseline: SourcePrior, *, n_items: int, raters: int, choices: int,
              difference: float | None = None, n_sims: int = 2000, seed: int = 0) -> Precision:
    """The planner's figures for one design (cached: the arguments are all hashable)."""
    if not 1 <= raters <= MAX_RATERS:
        raise ValueError(f"the planner simulates 1 to {MAX_RATERS} workers per unit, not {raters}")
    if not 2 <= choices <= MAX_CHOICES:
        raise ValueError(f"the planner simulates 2 to {MAX_CHOICES} answer choices, not {choices}")
    rng = np.random.default_rng(seed)
    rows = []
    for prior in priors:
        if n_items < 1:
            break
        u = simulate_utility(prior, n_items=n_items, raters=raters, choices=choices, n_sims=n_sims, rng=rng)
        useful, not_useful = (u == 1).mean(axis=1), (u == -1).mean(axis=1)
        rows.append(SourcePrecision(prior.name, float(useful.mean()), float(not_useful.mean()),
                                    half_width(useful), half_width(not_useful)))
    detectable = (smallest_detectable_difference(baseline, n_items=n_items, raters=raters, choices=choices,
                                                 n_sims=n_sims, seed=seed) if n_items >= 1 else None)
    needed = needed_sims = None
    if difference is not None:
        needed_sims = min(n_sims, ITEMS_NEEDED_MAX_SIMS)
        needed = items_needed(baseline, difference, raters=raters, choices=choices, n_sims=needed_sims, seed=seed)
    return Precision(n_items, raters, choices, n_sims, seed, tuple(rows), baseline.name, detectable, difference,
                     needed, needed_sims)
