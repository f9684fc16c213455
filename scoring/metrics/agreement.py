"""Inter-annotator agreement over raw annotations (SPEC section 2).

Both functions take the annotations in long form, one entry per answer: ``units[i]`` is the unit
(e.g. item x source, or unit id) that answer ``labels[i]`` was given for. Labels are nominal."""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import krippendorff
import numpy as np
import pandas as pd
from statsmodels.stats import inter_rater


def value_counts_matrix(units: Sequence[Hashable], labels: Sequence[Hashable]) -> np.ndarray:
    """units x categories matrix of how many annotators gave each label to each unit."""
    if len(units) != len(labels):
        raise ValueError(f"units has {len(units)} entries but labels has {len(labels)}")
    u_codes, u_uniques = pd.factorize(pd.Series(units))
    l_codes, l_uniques = pd.factorize(pd.Series(labels))
    if (l_codes < 0).any() or (u_codes < 0).any():
        raise ValueError("agreement: drop missing units/labels before computing agreement")
    counts = np.bincount(u_codes * len(l_uniques) + l_codes, minlength=len(u_uniques) * len(l_uniques))
    return counts.reshape(len(u_uniques), len(l_uniques))


def krippendorff_alpha(units: Sequence[Hashable], labels: Sequence[Hashable]) -> float:
    """Krippendorff's alpha, nominal level, via the ``krippendorff`` package (value-counts form,
    so the number of raters may differ between units; units with a single answer add nothing).
    NaN when there is no pairable unit or only one label value is ever used."""
    return alpha_from_counts(value_counts_matrix(units, labels))


def alpha_from_counts(counts: np.ndarray) -> float:
    """:func:`krippendorff_alpha` of a units x categories matrix (:func:`value_counts_matrix`)."""
    counts = counts[counts.sum(axis=1) >= 2]
    if counts.shape[0] == 0 or counts.shape[1] < 2:
        return float("nan")
    return float(krippendorff.alpha(value_counts=counts, level_of_measurement="nominal"))


def fleiss_kappa(units: Sequence[Hashable], labels: Sequence[Hashable]) -> float:
    """Fleiss' kappa via statsmodels. Requires every unit to have the same number of raters:
    raises ``ValueError`` naming the counts otherwise."""
    return kappa_from_counts(value_counts_matrix(units, labels))


def kappa_from_counts(counts: np.ndarray) -> float:
    """:func:`fleiss_kappa` of a units x categories matrix (:func:`value_counts_matrix`)."""
    if counts.shape[0] == 0:
        raise ValueError("fleiss_kappa: no annotations")
    raters = counts.sum(axis=1)
    if (raters != raters[0]).any():
        sizes = sorted(set(raters.tolist()))
        raise ValueError(f"fleiss_kappa needs the same number of raters for every unit; found {sizes}")
    if counts.shape[1] < 2:
        return float("nan")
    return float(inter_rater.fleiss_kappa(counts, method="fleiss"))
