"""Percentile bootstrap intervals for the report's association measures, resampling units.

Theil's U depends only on the joint counts of two categorical columns, and resampling n rows
with replacement draws those counts from Multinomial(n, observed joint shares); so the intervals
are computed from multinomial draws of the contingency table (fast whatever n is). The
correlation ratio needs the continuous values, so its resamples draw row indices (in chunks).
Both are drawn with the run's recorded bootstrap settings (``results["bootstrap"]``, those of the
utility shares' intervals: ``run_bootstrap``); a run from before they were recorded gets what runs
drew with then (``UNRECORDED_BOOTSTRAP``), and the report says so."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from scoring.metrics.association import correlation_ratio_rows
from scoring.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED

CONFIDENCE = 0.95
# What every run drew its intervals with before results.json recorded its bootstrap (6a261a1: the
# percentile bootstrap's defaults were 2,000 resamples, seed 0, 95% then): an old run's fallback,
# fixed here so that changing today's ``DEFAULT_RESAMPLES`` / ``DEFAULT_SEED`` never changes what an
# old run's intervals are said, or redrawn, to be.
UNRECORDED_BOOTSTRAP = {"n_resamples": 2000, "seed": 0, "confidence": 0.95}


def run_bootstrap(results: dict) -> tuple[dict, bool]:
    """The bootstrap settings the run recorded (``results["bootstrap"]``: n_resamples, seed,
    confidence), for the intervals the report draws itself and for every note that names them
    (``results_folder.bootstrap_note``), and whether they were recorded; a run from before they were
    recorded gets what runs drew with then (``UNRECORDED_BOOTSTRAP``, never today's defaults), and
    False. The one owner of that fallback."""
    boot = results.get("bootstrap") or {}
    if boot.get("n_resamples") is not None and boot.get("seed") is not None:
        return {"n_resamples": int(boot["n_resamples"]), "seed": int(boot["seed"]),
                "confidence": float(boot.get("confidence") or CONFIDENCE)}, True
    return dict(UNRECORDED_BOOTSTRAP), False


def _entropy_rows(counts: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of a (resamples x categories) count matrix."""
    totals = counts.sum(axis=1, keepdims=True)
    p = np.divide(counts, totals, out=np.zeros_like(counts, dtype=float), where=totals > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)


def theils_u_draws(x: Sequence, y: Sequence, *, n_resamples: int = DEFAULT_RESAMPLES,
                   seed: int = DEFAULT_SEED) -> np.ndarray:
    """Bootstrap draws of U(X | Y) (the convention of ``scoring.metrics.theils_u``: 1.0 when the
    resampled X is constant)."""
    cx, _ = pd.factorize(pd.Series(list(x)), use_na_sentinel=False)
    cy, _ = pd.factorize(pd.Series(list(y)), use_na_sentinel=False)
    n = cx.size
    if n == 0:
        return np.array([])
    nx, ny = int(cx.max()) + 1, int(cy.max()) + 1
    joint = np.bincount(cy * nx + cx, minlength=nx * ny).astype(float) / n
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, joint, size=n_resamples).astype(float).reshape(n_resamples, ny, nx)
    h_x = _entropy_rows(draws.sum(axis=1))
    # H(X | Y) = sum_y p(y) H(X | Y = y)
    per_y = np.stack([_entropy_rows(draws[:, j, :]) for j in range(ny)], axis=1)
    p_y = draws.sum(axis=2) / n
    h_x_given_y = (p_y * per_y).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(h_x > 1e-12, (h_x - h_x_given_y) / np.where(h_x > 1e-12, h_x, 1.0), 1.0)
    return np.clip(u, 0.0, 1.0)


CHUNK_CELLS = 2_000_000  # row indices drawn at once (about 16 MB of them), whatever n is


def correlation_ratio_draws(categories: Sequence, values: Sequence[float], *, n_resamples: int = DEFAULT_RESAMPLES,
                            seed: int = DEFAULT_SEED) -> np.ndarray:
    """Bootstrap draws of the correlation ratio eta, each computed as ``scoring.metrics.correlation_ratio``
    computes it (``correlation_ratio_rows``: 0.0 when a resample's values are all equal or its numerator
    is 0, never outside [0, 1]). Memory stays bounded: the resamples are drawn a few at a time
    (``CHUNK_CELLS`` row indices)."""
    codes, _ = pd.factorize(pd.Series(list(categories)), use_na_sentinel=False)
    y = np.asarray(values, dtype=float)
    n = codes.size
    if n == 0:
        return np.array([])
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_resamples, CHUNK_CELLS // n))
    out = []
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        out.append(correlation_ratio_rows(codes[idx], y[idx]))
    return np.concatenate(out)


def percentile_ci(draws: np.ndarray, confidence: float = CONFIDENCE) -> list[float | None]:
    if draws.size == 0:
        return [None, None]
    alpha = (1 - confidence) / 2
    return [float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))]
