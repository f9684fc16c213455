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


def correlation_ratio(categories: Sequence, measurements: Sequence[float]) -> float:
    """Correlation ratio eta between a categorical and a continuous variable:
    sqrt( sum_c n_c (mean_c - mean)^2 / sum_i (x_i - mean)^2 ), in [0, 1]; 0.0 when the
    denominator (or the numerator) is 0. Raises ``ValueError`` on unequal lengths or NaN measurements."""
    codes = _codes(categories)
    y = np.asarray(measurements, dtype=float)
    if codes.size != y.size:
        raise ValueError(f"categories has {codes.size} values but measurements has {y.size}")
    if y.size == 0:
        return 0.0
    if np.isnan(y).any():
        raise ValueError("correlation_ratio: measurements contain NaN; drop those rows first")
    n_c = np.bincount(codes).astype(float)
    mean_c = np.bincount(codes, weights=y) / np.where(n_c > 0, n_c, 1)
    mean = y.mean()
    numerator = float((n_c * (mean_c - mean) ** 2).sum())
    denominator = float(((y - mean) ** 2).sum())
    if numerator == 0.0 or denominator == 0.0:
        return 0.0
    return float(np.sqrt(numerator / denominator))
