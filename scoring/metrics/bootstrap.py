"""Bootstrap confidence intervals (percentile method)."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np
from scipy import stats

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable = np.mean,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` (a numpy reducer taking ``axis``) via
    ``scipy.stats.bootstrap``. Fewer than two values, or constant values, give (v, v)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (float("nan"), float("nan"))
    if data.size < 2 or np.all(data == data[0]):
        v = float(statistic(data))
        return (v, v)
    res = stats.bootstrap(
        (data,), statistic, n_resamples=n_resamples, confidence_level=confidence,
        method="percentile", vectorized=True, random_state=np.random.default_rng(seed),
    )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def share_cis(
    labels: Sequence[Hashable],
    categories: Sequence[Hashable],
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[Hashable, tuple[float, float, float]]:
    """Share of each category with its percentile bootstrap interval: {category: (share, lo, hi)}.

    Resampling n labels with replacement makes the category counts Multinomial(n, observed shares),
    so the bootstrap draws counts directly (O(resamples x categories), whatever n is): the same
    distribution as resampling rows, without materialising them."""
    arr = np.asarray(labels, dtype=object)
    n = arr.size
    cats = list(categories)
    if n == 0:
        return {c: (float("nan"), float("nan"), float("nan")) for c in cats}
    observed = np.array([(arr == c).sum() for c in cats], dtype=float)
    other = n - observed.sum()
    p = np.append(observed, other) / n
    p = np.clip(p, 0, 1)
    p = p / p.sum()
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, p, size=n_resamples)[:, : len(cats)] / n
    alpha = (1 - confidence) / 2
    lo = np.quantile(draws, alpha, axis=0)
    hi = np.quantile(draws, 1 - alpha, axis=0)
    return {c: (float(observed[i] / n), float(lo[i]), float(hi[i])) for i, c in enumerate(cats)}
