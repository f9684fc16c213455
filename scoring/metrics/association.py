"""Association measures of SPEC section 3: Theil's U and the correlation ratio.

Both are written with numpy over factorised codes (no per-row Python loops) and are checked in
the tests against dython's implementations, which define the conventions used here."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def _codes(values) -> np.ndarray:
    codes, _ = pd.factorize(pd.Series(list(values) if not isinstance(values, (np.ndarray, pd.Series)) else values),
                            use_na_sentinel=False)
    return np.asarray(codes, dtype=np.int64)


def entropy(x: Sequence) -> float:
    """Shannon entropy (nats) of the empirical distribution of ``x``."""
    codes = _codes(x)
    if codes.size == 0:
        return 0.0
    p = np.bincount(codes) / codes.size
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def conditional_entropy(x: Sequence, y: Sequence) -> float:
    """H(X | Y) in nats."""
    cx, cy = _codes(x), _codes(y)
    if cx.size != cy.size:
        raise ValueError(f"x has {cx.size} values but y has {cy.size}")
    if cx.size == 0:
        return 0.0
    nx = cx.max() + 1
    joint = np.bincount(cy * nx + cx, minlength=(cy.max() + 1) * nx).reshape(-1, nx).astype(float)
    p_xy = joint / cx.size
    p_y = p_xy.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p_xy > 0, p_xy * np.log(p_y / p_xy), 0.0)
    return float(terms.sum())


def theils_u(x: Sequence, y: Sequence) -> float:
    """Theil's uncertainty coefficient U(X | Y) = (H(X) - H(X|Y)) / H(X), in [0, 1].

    Asymmetric: how much knowing ``y`` tells about ``x``. Returns 1.0 when H(X) = 0 (``x``
    constant), the dython convention. Missing values (None/NaN) are treated as a category of their
    own: drop them before calling if that is not wanted. Raises ``ValueError`` on unequal lengths."""
    h_x = entropy(x)
    if h_x == 0.0:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} values but y has {len(y)}")
        return 1.0
    return float((h_x - conditional_entropy(x, y)) / h_x)


# How far outside [0, 1] rounding may leave eta before it is clipped back; a larger excursion is a bug
# (the constant-measurements rule of ``correlation_ratio_rows`` is what keeps rounding this small) and raises.
ETA_ROUNDING = 1e-9


def correlation_ratio_rows(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Correlation ratio eta of each row of ``values`` (m x n floats, no NaN) grouped by the same row of
    ``codes`` (m x n category codes, 0..k-1): the one computation behind ``correlation_ratio`` and the
    report's bootstrap draws (``scoring.reports.intervals.correlation_ratio_draws``).

    A row whose values are all equal (``np.ptp`` is 0) has no spread: its total sum of squares is taken
    as 0 and its eta is 0.0 (SPEC section 3), whatever rounding leaves in the computed sums (for seven values
    of 0.1 both sums are rounding noise, whose ratio gave eta 1.89). The values are centred on their row
    mean before the sums, so that rounding scales with their spread rather than their size. Rounding
    excursions above 1 of at most ``ETA_ROUNDING`` are clipped; a larger one raises ``ArithmeticError``."""
    m = values.shape[0]
    k = int(codes.max()) + 1
    centred = values - values.mean(axis=1, keepdims=True)
    offsets = (np.arange(m)[:, None] * k + codes).ravel()
    n_c = np.bincount(offsets, minlength=m * k).reshape(m, k).astype(float)
    s_c = np.bincount(offsets, weights=centred.ravel(), minlength=m * k).reshape(m, k)
    mean_c = np.divide(s_c, n_c, out=np.zeros_like(s_c), where=n_c > 0)
    mean = centred.mean(axis=1, keepdims=True)
    between = (n_c * (mean_c - mean) ** 2).sum(axis=1)
    total = ((centred - mean) ** 2).sum(axis=1)
    spread = (np.ptp(values, axis=1) > 0) & (total > 0)
    eta = np.sqrt(np.divide(between, total, out=np.zeros_like(total), where=spread))
    if (eta > 1.0 + ETA_ROUNDING).any():
        raise ArithmeticError(f"correlation ratio {eta.max()!r} is above 1 by more than rounding")
    return np.minimum(eta, 1.0)


def correlation_ratio(categories: Sequence, measurements: Sequence[float]) -> float:
    """Correlation ratio eta between a categorical and a continuous variable:
    sqrt( sum_c n_c (mean_c - mean)^2 / sum_i (x_i - mean)^2 ), in [0, 1]; 0.0 when the measurements
    are all equal (no spread: the denominator is 0) or the numerator is 0 (``correlation_ratio_rows``).
    Raises ``ValueError`` on unequal lengths or NaN measurements."""
    codes = _codes(categories)
    y = np.asarray(measurements, dtype=float)
    if codes.size != y.size:
        raise ValueError(f"categories has {codes.size} values but measurements has {y.size}")
    if y.size == 0:
        return 0.0
    if np.isnan(y).any():
        raise ValueError("correlation_ratio: measurements contain NaN; drop those rows first")
    return float(correlation_ratio_rows(codes[None, :], y[None, :])[0])
