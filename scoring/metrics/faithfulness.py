"""Faithfulness of highlights (SPEC section 6; ERASER, DeYoung et al. 2020), with this app's
documented deviation: y_hat is the class predicted *from the highlight*, not from the full input.

    sufficiency       = mean( p(y_hat | x) - p(y_hat | h) )      lower is better
    comprehensiveness = mean( p(y_hat | x) - p(y_hat | x \\ h) )  higher is better
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CAVEATS = {
    "deviation": (
        "y_hat is the class predicted from the highlight, not from the full input as in ERASER; "
        "the numbers are not directly comparable with ERASER's tables."
    ),
    "sufficiency": (
        "Negative sufficiency is expected for select-then-predict models (their predictor is "
        "trained on highlights) and is not a defect."
    ),
    "comprehensiveness": (
        "Comprehensiveness can read near zero for select-then-predict models because both of its "
        "passes (full input, input without the highlight) are off the predictor's training distribution."
    ),
}


def _diff(p_full: Sequence[float], p_other: Sequence[float], name: str) -> float:
    full = np.asarray(p_full, dtype=float)
    other = np.asarray(p_other, dtype=float)
    if full.shape != other.shape:
        raise ValueError(f"{name}: p_full has {full.size} values but the other pass has {other.size}")
    if full.size == 0:
        raise ValueError(f"{name}: no items to average over")
    both = np.concatenate([full, other])
    if np.isnan(both).any() or (both < 0).any() or (both > 1).any():
        raise ValueError(f"{name}: probabilities must be numbers in [0, 1]")
    return float((full - other).mean())


def sufficiency(p_full: Sequence[float], p_highlight: Sequence[float]) -> float:
    """Mean of p(y_hat | x) - p(y_hat | h) over the evaluated items; lower is better."""
    return _diff(p_full, p_highlight, "sufficiency")


def comprehensiveness(p_full: Sequence[float], p_without: Sequence[float]) -> float:
    """Mean of p(y_hat | x) - p(y_hat | x \\ h) over the evaluated items; higher is better."""
    return _diff(p_full, p_without, "comprehensiveness")
