"""How precise will a study be? The study planner's simulation (pure numpy, no Django).

A design is ``n_items`` items, each shown with every source's rationale to ``raters`` workers per
unit, who answer one of ``choices`` labels before and after reading the rationale. The study scores
a unit by majority vote (a tie counts as wrong) and the utility table (SPEC section 2). The planner
simulates exactly that: each worker answers right with a per-worker probability (``q_before``,
``q_after``, per source) and otherwise picks one of the wrong labels at random. The simulated right
votes of a unit decide its majority through the rule's probability of picking the right label given
them, computed from the rule's one owner (:func:`scoring.metrics.labels.majority_index`, or
``strict_majority_index`` for the other reading) on every way the wrong votes can fall
(``_rule_table``), so any number of answer choices is simulated exactly; the utility comes from
:func:`scoring.metrics.labels.utility_category` (the utility table's one owner), then the shares are
taken over the items, once per simulated study.

Every figure uses scoring's default reading of "majority vote", the plurality (``RULE``); with three
or more choices the same simulated votes are also read by the strict majority (``OTHER_RULE``: more
than half of the workers), which scoring reports beside the default, and ``Precision.other_sources``
gives each source's shares under it.

The prior (what the shares are expected to be) is given as shares of useful / unsure / not useful
observed with some number of raters (the released study's, or a scored pilot's: with the workers its
units actually had, ``Workers``, so a pilot short of workers is fitted as it was observed). It is
turned into per-worker rates by inverting the majority-vote probability (exact, from the same rule,
averaged over the units' worker counts): after-correct = useful + unsure, before-correct =
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

Cost: at most ``MAX_UNIT_SIMS`` simulated units per source (fewer simulated studies for a large
design, never fewer than ``MIN_SIMS``; ``Precision.n_sims`` is the count used), drawn in chunks of at
most ``CHUNK_UNITS`` units, so a page's memory and time are bounded whatever the number of items.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy.stats import binom

from scoring.metrics.labels import (
    MAJORITY_RULE,
    MAJORITY_RULES,
    STRICT_MAJORITY,
    majority_index,
    strict_majority_index,
    utility_category,
)
from studies.majority import remaining_ways

ALPHA = 0.05
POWER = 0.80
MAX_ITEMS = 5000
MAX_RATERS = 25
# Past this many answer choices the planner refuses (the page says so): the probabilities below are
# exact for any number, this only bounds a nonsensical dataset.
MAX_CHOICES = 1000
# The rule every published figure uses (scoring's default reading of "majority vote") and the other
# reading, which scoring reports beside it (``majority_readings``); both named by ``MAJORITY_RULES``.
RULE = MAJORITY_RULE
OTHER_RULE = next(rule for rule in MAJORITY_RULES if rule != MAJORITY_RULE)
_RULE_INDEX = {MAJORITY_RULE: majority_index, STRICT_MAJORITY: strict_majority_index}
# The utility table, read from its one definition: ``_TABLE[before_correct, after_correct]``.
_TABLE = np.array([[utility_category(bool(b), bool(a)) for a in (0, 1)] for b in (0, 1)], dtype=np.int8)

# The cost of one page's figures is bounded: a source's simulation runs at most ``MAX_UNIT_SIMS``
# simulated units (studies x items), so a design of more than ``MAX_UNIT_SIMS / n_sims`` items runs
# fewer simulated studies (never fewer than ``MIN_SIMS``; ``Precision.n_sims`` is the count used,
# ``n_sims_asked`` the count asked), and every simulation is drawn in chunks of at most
# ``CHUNK_UNITS`` units, so memory stays bounded whatever the number of items.
MAX_UNIT_SIMS = 2_000_000
MIN_SIMS = 200
CHUNK_UNITS = 1_000_000
# Vote patterns enumerated through the rule's own function per count of right votes; past this
# the same probability is computed by counting (``_rule_table``).
ENUMERATE_MAX_WAYS = 50_000
# Bump when a change here changes a figure: the Django cache of the figures is keyed by it.
VERSION = 2

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

# Workers per unit: one count for every unit, or the units' real counts as ((workers, units), ...)
# pairs (a pilot whose units were short of workers; any non-negative weights).
Workers = int | tuple[tuple[int, float], ...]


def _workers(raters: Workers) -> tuple[tuple[int, float], ...]:
    if isinstance(raters, int | np.integer):
        return ((int(raters), 1.0),)
    total = sum(n for _, n in raters)
    if total <= 0:
        raise ValueError("no units with workers to fit the prior with")
    return tuple((int(r), n / total) for r, n in raters if n > 0)


@lru_cache(maxsize=256)
def _rule_table(raters: int, choices: int, rule: str = RULE) -> np.ndarray:
    """``table[k]``: the probability that ``rule`` picks the right label when ``k`` of ``raters``
    workers answered right and each of the others picked one of the ``choices - 1`` wrong labels at
    random. Enumerated through the rule's own function (``majority_index`` or
    ``strict_majority_index``) on every way the wrong votes can fall; past ``ENUMERATE_MAX_WAYS``
    ways, counted: the plurality is right when every wrong label has fewer than ``k`` votes
    (multinomial coefficients of the truncated exponential series), the strict majority when
    ``2k > raters``. ``tests/scoring/test_planning.py`` checks the two agree."""
    if raters < 1 or choices < 2:
        raise ValueError(f"the planner needs at least 1 worker and 2 choices, not {raters} and {choices}")
    table = np.zeros(raters + 1)
    wrong_labels = choices - 1
    for k in range(raters + 1):
        m = raters - k
        if math.comb(m + wrong_labels - 1, wrong_labels - 1) <= ENUMERATE_MAX_WAYS:
            ways = remaining_ways(m, wrong_labels)
            log_p = (math.lgamma(m + 1) - np.array([sum(math.lgamma(v + 1) for v in row) for row in ways])
                     - m * math.log(wrong_labels))
            counts = np.concatenate([np.full((len(ways), 1), k), ways], axis=1)
            table[k] = float(np.exp(log_p[_RULE_INDEX[rule](counts) == 0]).sum())
        elif rule == STRICT_MAJORITY:
            table[k] = float(2 * k > raters)
        else:
            # P(each wrong label < k votes) = m! [x^m] (sum_{j<k} (x / wrong_labels)^j / j!)^wrong_labels
            if k == 0:
                continue  # every wrong label would need fewer than no votes
            series = np.array([(1 / wrong_labels) ** j / math.factorial(j) for j in range(min(k, m + 1))])
            poly = np.ones(1)
            for _ in range(wrong_labels):
                poly = np.convolve(poly, series)[: m + 1]
            table[k] = float(poly[m] * math.factorial(m)) if len(poly) > m else 0.0
    table = np.clip(table, 0.0, 1.0)
    table.setflags(write=False)
    return table


def p_majority_right(q: float, raters: Workers, choices: int, rule: str = RULE) -> float:
    """P(the majority of ``raters`` workers is right under ``rule``) when each is right with
    probability ``q`` and otherwise picks a wrong label at random: exact. ``raters`` may be the
    units' real worker counts (``Workers``): the probability averaged over them."""
    q = min(max(float(q), 0.0), 1.0)
    total = 0.0
    for r, weight in _workers(raters):
        k = np.arange(r + 1)
        pmf = np.array([math.comb(r, int(i)) for i in k], dtype=float) * q ** k * (1 - q) ** (r - k)
        total += weight * float(pmf @ _rule_table(r, choices, rule))
    return min(max(total, 0.0), 1.0)


def worker_rate(p_majority: float, raters: Workers, choices: int) -> float:
    """The per-worker rate whose majority (the default rule) is right with probability
    ``p_majority`` (bisection); ``raters`` as in :func:`p_majority_right`."""
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
    def from_shares(cls, name: str, useful: float, unsure: float, *, raters: Workers, choices: int) -> SourcePrior:
        """The rates whose majority (the default rule), over ``raters`` workers per unit (or the
        units' real counts, ``Workers``), reproduces the shares: the after-rate from the after-right
        share (useful + unsure), the before-rate from the unsure share among the after-right units
        (with mixed worker counts a unit's after- and before-majorities share its workers, so the
        counts are weighted by how often their after-majority is right)."""
        after = useful + unsure
        before = unsure / after if after > 0 else 0.0
        q_after = worker_rate(after, raters, choices)
        mix = _workers(raters)
        weighted = tuple((r, w * p_majority_right(q_after, r, choices)) for r, w in mix)
        before_raters = weighted if len(mix) > 1 and sum(w for _, w in weighted) > 0 else raters
        return cls(name, worker_rate(before, before_raters, choices), q_after)


def released_priors() -> dict[str, SourcePrior]:
    out = {}
    for name, (useful, unsure, not_useful) in RELEASED_COUNTS.items():
        n = useful + unsure + not_useful
        out[name] = SourcePrior.from_shares(name, useful / n, unsure / n, raters=RELEASED_RATERS,
                                            choices=RELEASED_CHOICES)
    return out


def expected_shares(prior: SourcePrior, raters: int, choices: int, rule: str = RULE) -> tuple[float, float]:
    """The exact expected (useful, not useful) shares of ``prior``'s source under ``rule``."""
    before = p_majority_right(prior.q_before, raters, choices, rule)
    after = p_majority_right(prior.q_after, raters, choices, rule)
    return (1 - before) * after, 1 - after


def _right_votes(uniform: np.ndarray, q: float, raters: int) -> np.ndarray:
    """Right votes per unit, by inverting the binomial CDF at ``uniform`` (common random numbers)."""
    cdf = binom.cdf(np.arange(raters + 1), raters, q)
    return np.minimum(np.searchsorted(cdf, uniform, side="right"), raters)


def _rule_right(right_votes: np.ndarray, tie: np.ndarray | None, raters: int, choices: int,
                rule: str = RULE) -> np.ndarray:
    """Whether ``rule`` picks the right label of units with ``right_votes``: where how the wrong
    votes fall matters (three or more choices), it decides with probability ``_rule_table`` at the
    uniform ``tie`` (the same ``tie`` for both rules: the strict majority is right only where the
    plurality is); with two choices the table is 0 or 1 and ``tie`` is not needed."""
    p = _rule_table(raters, choices, rule)[right_votes]
    return p > 0.5 if tie is None else p > tie


def _right(uniform: np.ndarray, q: float, raters: int, choices: int, rng: np.random.Generator,
           rule: str = RULE) -> np.ndarray:
    """Simulated majority-is-right per unit: right votes by inverting the binomial CDF at
    ``uniform``, then the rule's probability of picking the right label given them."""
    tie = rng.random(np.shape(uniform)) if choices > 2 else None
    return _rule_right(_right_votes(uniform, q, raters), tie, raters, choices, rule)


def _chunks(n_sims: int, n_items: int) -> list[int]:
    """Simulated studies per chunk: at most ``CHUNK_UNITS`` units each (one study at least)."""
    per = max(1, CHUNK_UNITS // max(n_items, 1))
    return [min(per, n_sims - start) for start in range(0, n_sims, per)]


def sims_used(n_sims: int, n_items: int) -> int:
    """The simulated studies a design of ``n_items`` items runs when ``n_sims`` are asked: at most
    ``MAX_UNIT_SIMS`` units per source, never fewer than ``MIN_SIMS`` studies."""
    return min(n_sims, max(MIN_SIMS, MAX_UNIT_SIMS // max(n_items, 1)))


def simulate_readings(prior: SourcePrior, *, n_items: int, raters: int, choices: int, n_sims: int,
                      rng: np.random.Generator, rules: tuple[str, ...] = (RULE,)) -> dict[str, np.ndarray]:
    """Utility (-1/0/+1) of each unit of one source in ``n_sims`` simulated studies, (n_sims,
    n_items), under each of ``rules`` applied to the same simulated votes (how scoring gives its
    readings: the same answers, each rule)."""
    before_votes = _right_votes(rng.random((n_sims, n_items)), prior.q_before, raters)
    after_votes = _right_votes(rng.random((n_sims, n_items)), prior.q_after, raters)
    ties = (rng.random((n_sims, n_items)), rng.random((n_sims, n_items))) if choices > 2 else (None, None)
    out = {}
    for rule in rules:
        before = _rule_right(before_votes, ties[0], raters, choices, rule)
        after = _rule_right(after_votes, ties[1], raters, choices, rule)
        out[rule] = _TABLE[before.astype(np.intp), after.astype(np.intp)]
    return out


def simulate_utility(prior: SourcePrior, *, n_items: int, raters: int, choices: int, n_sims: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Utility (-1/0/+1) of each unit of one source in ``n_sims`` simulated studies: (n_sims, n_items)."""
    return simulate_readings(prior, n_items=n_items, raters=raters, choices=choices, n_sims=n_sims, rng=rng)[RULE]


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
    """Simulated paired studies: ``prior``'s source and a second source with the same before-rate,
    on the same items. Everything but the second source's after-votes is drawn once per chunk of
    studies (``_chunks``), so the power at different differences uses common random numbers (and is
    monotone in them). One chunk is kept in memory; more are drawn again from their own seeds at
    each difference, so memory stays at one chunk's."""

    def __init__(self, prior: SourcePrior, *, n_items: int, raters: int, choices: int, n_sims: int, seed: int):
        self.prior, self.n_items, self.raters, self.choices = prior, n_items, raters, choices
        self.seed = seed
        self.sizes = _chunks(n_sims, n_items)
        self.kept = self._draw(0) if len(self.sizes) == 1 else None

    def _draw(self, index: int):
        rows = self.sizes[index]
        rng = np.random.default_rng(self.seed if index == 0 else [self.seed, index])
        x = simulate_utility(self.prior, n_items=self.n_items, raters=self.raters, choices=self.choices,
                             n_sims=rows, rng=rng) == 1
        before = _right(rng.random((rows, self.n_items)), self.prior.q_before, self.raters, self.choices, rng)
        after_uniform = rng.random((rows, self.n_items))
        after_tie = rng.random((rows, self.n_items)) if self.choices > 2 else None
        return x, before, after_uniform, after_tie

    def power(self, difference: float) -> float:
        q_after = _useful_after_rate(self.prior, difference, self.raters, self.choices)
        if q_after is None:
            return float("nan")
        rejected = 0
        for index in range(len(self.sizes)):
            x, before, after_uniform, after_tie = self.kept if self.kept is not None else self._draw(index)
            after = _rule_right(_right_votes(after_uniform, q_after, self.raters), after_tie, self.raters,
                                self.choices)
            y = _TABLE[before.astype(np.intp), after.astype(np.intp)] == 1
            rejected += int(mcnemar_rejects(x, y).sum())
        return rejected / sum(self.sizes)


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
    n_sims_asked: int | None = None  # the simulated studies asked (``n_sims``: used; fewer past MAX_UNIT_SIMS)
    rule: str = RULE  # the majority rule every figure above uses (scoring's default reading)
    other_rule: str = OTHER_RULE
    # The same simulated votes under ``other_rule`` (empty with two choices: the readings coincide).
    other_sources: tuple[SourcePrecision, ...] = field(default=())

    @property
    def readings_coincide(self) -> bool:
        """With two answer choices a plurality is more than half of the workers: one reading."""
        return self.choices == 2


# The search for the items needed simulates a study per candidate size many times over: it runs at
# most this many simulated studies per size (the method line says how many it used).
ITEMS_NEEDED_MAX_SIMS = 1000


def _shares(utility: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (utility == 1).mean(axis=1), (utility == -1).mean(axis=1)


def _row(name: str, shares: list[tuple[np.ndarray, np.ndarray]]) -> SourcePrecision:
    useful = np.concatenate([u for u, _ in shares])
    not_useful = np.concatenate([n for _, n in shares])
    return SourcePrecision(name, float(useful.mean()), float(not_useful.mean()), half_width(useful),
                           half_width(not_useful))


@lru_cache(maxsize=256)
def precision(priors: tuple[SourcePrior, ...], baseline: SourcePrior, *, n_items: int, raters: int, choices: int,
              difference: float | None = None, n_sims: int = 2000, seed: int = 0) -> Precision:
    """The planner's figures for one design (cached: the arguments are all hashable). A design of
    many items runs fewer simulated studies than asked (``sims_used``), in chunks (``_chunks``)."""
    if not 1 <= raters <= MAX_RATERS:
        raise ValueError(f"the planner simulates 1 to {MAX_RATERS} workers per unit, not {raters}")
    if not 2 <= choices <= MAX_CHOICES:
        raise ValueError(f"the planner simulates 2 to {MAX_CHOICES} answer choices, not {choices}")
    asked, n_sims = n_sims, sims_used(n_sims, n_items)
    rules = (RULE,) if choices == 2 else (RULE, OTHER_RULE)
    rng = np.random.default_rng(seed)
    rows, other_rows = [], []
    for prior in priors:
        if n_items < 1:
            break
        shares = {rule: [] for rule in rules}
        for size in _chunks(n_sims, n_items):  # one chunk's units in memory at a time; its shares kept
            chunk = simulate_readings(prior, n_items=n_items, raters=raters, choices=choices, n_sims=size, rng=rng,
                                      rules=rules)
            for rule in rules:
                shares[rule].append(_shares(chunk[rule]))
        rows.append(_row(prior.name, shares[RULE]))
        if choices > 2:
            other_rows.append(_row(prior.name, shares[OTHER_RULE]))
    detectable = (smallest_detectable_difference(baseline, n_items=n_items, raters=raters, choices=choices,
                                                 n_sims=n_sims, seed=seed) if n_items >= 1 else None)
    needed = needed_sims = None
    if difference is not None:
        needed_sims = min(n_sims, ITEMS_NEEDED_MAX_SIMS)
        needed = items_needed(baseline, difference, raters=raters, choices=choices, n_sims=needed_sims, seed=seed)
    return Precision(n_items, raters, choices, n_sims, seed, tuple(rows), baseline.name, detectable, difference,
                     needed, needed_sims, asked, RULE, OTHER_RULE, tuple(other_rows))
