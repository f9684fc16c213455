"""Faithfulness of highlights (SPEC section 6; ERASER, DeYoung et al. 2020):

    sufficiency       = mean( p(y_hat | x) - p(y_hat | h) )      lower is better
    comprehensiveness = mean( p(y_hat | x) - p(y_hat | x \\ h) )  higher is better

y_hat comes from one of two rules (``studies.lm.highlights.Y_HAT_FROM``), stored with the
probabilities and named next to the numbers: ``highlight`` (the highlight pass; the seed,
pyhighlights, scores the model that made the highlight this way, select-then-predict; SPEC's
definition) or ``full`` (the full input, as ERASER, for a task model that reads the full input; a
departure from SPEC, said in its caveat and in ``spec_rule``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

# SPEC section 6's reading of y_hat: the class predicted from the highlight, not from the full
# input (ERASER's). The faithfulness block names it (``spec_rule``) with the sources that follow it.
SPEC_Y_HAT_FROM = "highlight"
SPEC_RULE = ("SPEC section 6: y_hat is the class predicted from the highlight, not from the full input (ERASER takes "
             "it from the full input); a figure with y_hat from the full input departs from SPEC")

CAVEATS = {
    "y_hat_from_highlight": (
        "y_hat from the highlight pass (select-then-predict, as the seed pyhighlights scores the model that made "
        "the highlight); ERASER takes y_hat from the full input, so these numbers are not directly comparable with "
        "ERASER's tables."
    ),
    "y_hat_from_full": (
        "y_hat from the full input, as ERASER, for a task model that reads the full input and did not make the "
        "highlight: not SPEC's definition (SPEC section 6 takes y_hat from the highlight), so these numbers are "
        "not comparable with figures whose y_hat came from the highlight."
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


def caveats_for(rules: Iterable[str]) -> dict[str, str]:
    """The caveats that apply to figures computed with these y_hat rules: each rule's, and the
    select-then-predict ones when y_hat came from the highlight."""
    rules = set(rules)
    out = {f"y_hat_from_{rule}": CAVEATS[f"y_hat_from_{rule}"] for rule in ("highlight", "full") if rule in rules}
    if "highlight" in rules:
        out["sufficiency"] = CAVEATS["sufficiency"]
        out["comprehensiveness"] = CAVEATS["comprehensiveness"]
    return out


def spec_rule(rules_by_source: dict[str, Iterable[str]], assumed: Iterable[str] = ()) -> dict:
    """SPEC's y_hat rule (``SPEC_RULE``) and which sources' figures follow it: a source whose
    probabilities all took y_hat from the highlight follows it; one with any other rule does not.
    A source of ``assumed`` (some of its rules were assumed, not given: an import without a
    y_hat_from column) is not known to follow it and is listed in neither: the caller lists it
    apart, with the assumption (``studies.faithfulness_rules.ASSUMPTION``)."""
    rules = {name: sorted(set(r)) for name, r in rules_by_source.items()}
    assumed = set(assumed)
    return {
        "y_hat_from": SPEC_Y_HAT_FROM,
        "reading": SPEC_RULE,
        "sources_following": sorted(n for n, r in rules.items() if r == [SPEC_Y_HAT_FROM] and n not in assumed),
        "sources_departing": sorted(n for n, r in rules.items() if r != [SPEC_Y_HAT_FROM]),
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
