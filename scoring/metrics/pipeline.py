"""The vectorised scoring core: pure pandas/numpy over plain frames, no Django.

``study_score`` (``scoring.services.score``) loads a study's rows into the frames below and runs
:func:`score_frames` (imported outcomes: :func:`score_units`); the benchmark
(``benchmarks/scoring/bench_scoring.py``) runs the same :func:`score_frames` on synthetic frames. No per-annotation Python loop anywhere: everything is groupby / bincount.

Frames
------
annotations: one row per answer; columns ``unit_id``, ``participant_id``, ``step`` ("before" /
    "after"), ``answer`` (a choice label).
units: one row per unit; columns ``unit_id``, ``item_id``, ``source`` (name), ``gold`` (the correct
    choice label); optional ``task_correct`` (bool or NA), ``gen_u`` (-1/0/1 or NA), ``similarity``
    (float or NA).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scoring import metrics
from scoring.errors import ScoringError
from scoring.metrics.agreement import alpha_from_counts, kappa_from_counts
from scoring.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from scoring.metrics.labels import (
    MAJORITY_RULE,
    MAJORITY_RULES,
    MAJORITY_SPEC,
    UTILITY_NAMES,
    utility_category,
)

ALL = "all"
UTILITY_ORDER = [1, 0, -1]
# The utility table, read from its one definition (``metrics.utility_category``):
# ``UTILITY_TABLE[before_correct, after_correct]`` is the category of a unit.
UTILITY_TABLE = np.array(
    [[utility_category(bool(before), bool(after)) for after in (0, 1)] for before in (0, 1)], dtype=np.int8
)


def clean_json(value):
    """NaN/inf -> None and numpy scalars -> Python, recursively, so results are valid JSON."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return None if math.isnan(v) or math.isinf(v) else v
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def majorities(annotations: pd.DataFrame, steps: Iterable[str] = ("before", "after")) -> pd.DataFrame:
    """Majority answer per (unit, step), vectorised. Returns one row per unit with columns
    ``<step>_majority`` (label, or None on a tie), ``<step>_tie`` (bool), ``<step>_n`` (answers)."""
    steps = list(steps)
    a = annotations.loc[annotations["step"].isin(steps), ["unit_id", "step", "answer"]]
    a = a[a["answer"].notna() & (a["answer"] != "")]
    counts = a.groupby(["unit_id", "step", "answer"], observed=True, sort=False).size().rename("n").reset_index()
    n_answers = counts.groupby(["unit_id", "step"], observed=True)["n"].transform("sum")
    best = counts.groupby(["unit_id", "step"], observed=True)["n"].transform("max")
    top = counts[counts["n"] == best].copy()
    top["n_top"] = top.groupby(["unit_id", "step"], observed=True)["answer"].transform("size")
    top["n_answers"] = n_answers[top.index]
    top = top.drop_duplicates(["unit_id", "step"])
    top["tie"] = top["n_top"] > 1
    top["majority"] = top["answer"].astype(object).where(~top["tie"], None)
    out = pd.DataFrame(index=pd.Index(pd.unique(a["unit_id"]), name="unit_id"))
    for step in steps:
        part = top[top["step"] == step].set_index("unit_id")
        out[f"{step}_majority"] = part["majority"].reindex(out.index).astype(object)
        out[f"{step}_tie"] = part["tie"].reindex(out.index).fillna(False).astype(bool)
        out[f"{step}_n"] = part["n_answers"].reindex(out.index).fillna(0).astype(int)
    return out.reset_index()


def answers_right(frame: pd.DataFrame, annotations: pd.DataFrame) -> pd.DataFrame:
    """Adds ``<step>_right`` to the per-unit ``frame`` (columns ``unit_id``, ``gold``, and
    ``<step>_n`` from :func:`majorities`): how many of the unit's answers of each step are the gold
    label, counted over the answers :func:`majorities` counts, so that ``<step>_right / <step>_n``
    is the unit's per-answer accuracy (the other reading of an accuracy taken per unit majority)."""
    frame = frame.copy()
    a = annotations.loc[annotations["answer"].notna() & (annotations["answer"] != ""), ["unit_id", "step", "answer"]]
    a = a.merge(frame[["unit_id", "gold"]], on="unit_id", how="inner")
    a = a.assign(right=(a["answer"].astype(object) == a["gold"].astype(object)).astype(int))
    for step in ("before", "after"):
        right = a.loc[a["step"] == step].groupby("unit_id")["right"].sum()
        frame[f"{step}_right"] = frame["unit_id"].map(right).fillna(0).astype(int).to_numpy()
    return frame


def add_utility(frame: pd.DataFrame) -> pd.DataFrame:
    """Adds ``before_correct``, ``after_correct`` and ``utility`` from the majority columns and
    ``gold``. A tie or a missing majority counts as wrong (SPEC section 2)."""
    frame = frame.copy()
    gold = frame["gold"].astype(object)
    for step in ("before", "after"):
        maj = frame[f"{step}_majority"].astype(object)
        # exact label equality: annotations.choices.answer_is_correct, column-wise
        frame[f"{step}_correct"] = (maj.notna() & (maj == gold)).to_numpy(dtype=bool)
    frame["utility"] = UTILITY_TABLE[frame["before_correct"].to_numpy(dtype=np.intp),
                                      frame["after_correct"].to_numpy(dtype=np.intp)]
    return frame


def unit_outcomes(
    units: pd.DataFrame, annotations: pd.DataFrame, *, expected_raters: int
) -> tuple[pd.DataFrame, list[str], dict]:
    """Majority per unit and step, utility per unit; warnings for units short of annotators.

    Units with no complete answers at all are left out of the utility (and reported); units with
    fewer than ``expected_raters`` are scored on what they have and reported, never silently."""
    warnings: list[str] = []
    maj = majorities(annotations)
    frame = units.merge(maj, on="unit_id", how="left")
    for step in ("before", "after"):
        frame[f"{step}_n"] = frame[f"{step}_n"].fillna(0).astype(int)
        frame[f"{step}_tie"] = frame[f"{step}_tie"].fillna(False).astype(bool)
    frame["n_annotators"] = frame[["before_n", "after_n"]].min(axis=1)
    empty = frame["n_annotators"] == 0
    # A study that stops units early gives each unit its own number (``expected_raters`` column).
    expected = frame["expected_raters"] if "expected_raters" in frame else expected_raters
    short = (frame["n_annotators"] < expected) & ~empty
    if empty.any():
        none = sorted(str(s) for s, e in empty.groupby(frame["source"]).all().items() if e) if "source" in frame else []
        warnings.append(
            f"{int(empty.sum())} of {len(frame)} units have no completed answers yet and are left out of the scores"
            + (f" (no unit scored of source {', '.join(none)})." if none else ".")
        )
    if short.any():
        by_count = frame.loc[short, "n_annotators"].value_counts().sort_index()
        detail = ", ".join(f"{int(n)} with {int(k)}" for k, n in by_count.items())
        warnings.append(
            f"{int(short.sum())} units are short of the "
            + ("annotators they still need (a unit stopped early needs only those it held when it was decided)"
               if "expected_raters" in frame else f"{expected_raters} annotators the study asks for")
            + f" ({detail}); they are scored on the answers they have."
        )
    frame = frame[~empty].copy()
    frame["short"] = short[~empty].to_numpy(dtype=bool)
    frame = add_utility(frame)
    ties = {
        "before": int(frame["before_tie"].sum()),
        "after": int(frame["after_tie"].sum()),
        "units_with_tie": int((frame["before_tie"] | frame["after_tie"]).sum()),
    }
    if ties["units_with_tie"]:
        warnings.append(
            f"{ties['units_with_tie']} units had a majority tie ({ties['before']} before, {ties['after']} after); "
            "a tie counts as a wrong answer."
        )
    return frame, warnings, ties


# --- the other reading of "majority" (``studies.majority.MAJORITY_RULES``) -------------------------

# Why the two readings give the same figures where no unit's answers of a step fall on three or more
# choices (a yes/no study always): the label more annotators gave than any other of two has more than half.
MAJORITY_READINGS_COINCIDE = ("no unit's answers of a step fall on more than two choices, so the label more "
                              "annotators gave than any other is given by more than half of them: the readings "
                              "coincide")


def _strict_holds(annotations: pd.DataFrame) -> pd.DataFrame:
    """Per (unit, step) of the answers :func:`majorities` counts: ``strict`` (the top label has more
    than half of the answers) and ``n_choices`` (the distinct labels answered)."""
    a = annotations.loc[annotations["step"].isin(["before", "after"]), ["unit_id", "step", "answer"]]
    a = a[a["answer"].notna() & (a["answer"] != "")]
    counts = a.groupby(["unit_id", "step", "answer"], observed=True, sort=False).size()
    counts = counts[counts > 0]
    per = counts.groupby(level=["unit_id", "step"], observed=True).agg(["max", "sum", "size"]).reset_index()
    per["step"] = per["step"].astype(str)
    return per.assign(strict=2 * per["max"] > per["sum"], n_choices=per["size"])


def majority_readings(frame: pd.DataFrame, annotations: pd.DataFrame,
                      figures: Callable[[pd.DataFrame], dict] | None = None) -> dict:
    """The scored units' figures under each reading of the majority rule (``MAJORITY_RULES``): the
    default (plurality, ``frame``'s ``<step>_correct`` and ``utility``) and the strict majority,
    under which a unit whose plurality has no more than half of its answers has no majority answer
    and counts as wrong, like a tie. ``frame``: :func:`unit_outcomes`' per-unit table;
    ``figures(g)``: the figures of a reading over units ``g`` (with ``before_correct``,
    ``after_correct`` and ``utility`` of that reading; default: the utility shares), per source
    and over all (``ALL``). Gives the counts of units whose majority differs; the per-source
    figures only where some unit's answers of a step fall on three or more choices (else the
    readings coincide: ``MAJORITY_READINGS_COINCIDE``)."""
    shares = figures is None
    figures = figures or _reading_shares
    per = _strict_holds(annotations)
    strict = frame[["unit_id", "source", *(c for c in ("task_correct", "gen_u") if c in frame)]].copy()
    differs, three = {}, np.zeros(len(frame), dtype=bool)
    for step in ("before", "after"):
        part = per.loc[per["step"] == step].set_index("unit_id")
        holds = frame["unit_id"].map(part["strict"]).fillna(True).astype(bool).to_numpy()
        three |= frame["unit_id"].map(part["n_choices"]).fillna(0).to_numpy() >= 3
        differs[step] = frame[f"{step}_majority"].notna().to_numpy() & ~holds
        strict[f"{step}_correct"] = frame[f"{step}_correct"].to_numpy(dtype=bool) & holds
        strict[f"{step}_tie"] = frame[f"{step}_tie"].to_numpy(dtype=bool) | differs[step]
    strict["utility"] = UTILITY_TABLE[strict["before_correct"].to_numpy(dtype=np.intp),
                                      strict["after_correct"].to_numpy(dtype=np.intp)]
    out: dict = {
        "default": MAJORITY_RULE, "rules": dict(MAJORITY_RULES), "spec": MAJORITY_SPEC,
        "n_units": int(len(frame)), "n_units_three_or_more_choices": int(three.sum()),
        "n_units_majority_differs": {"before": int(differs["before"].sum()), "after": int(differs["after"].sum()),
                                     "units": int((differs["before"] | differs["after"]).sum())},
    }
    out["coincide"] = out["n_units_majority_differs"]["units"] == 0
    if not three.any():
        out["note"] = MAJORITY_READINGS_COINCIDE
        return out
    if shares:
        out["n_units_utility_differs"] = int((strict["utility"].to_numpy() != frame["utility"].to_numpy()).sum())
    readings = {MAJORITY_RULE: frame, next(r for r in MAJORITY_RULES if r != MAJORITY_RULE): strict}
    by_source: dict = {}
    for reading, units in readings.items():
        groups = [(str(name), g) for name, g in units.groupby("source", sort=True)] + [(ALL, units)]
        for name, g in groups:
            by_source.setdefault(name, {})[reading] = {**figures(g), **tie_counts(g)}
    out["by_source"] = by_source
    return out


def _reading_shares(g: pd.DataFrame) -> dict:
    """A reading's utility shares over units ``g`` (no intervals): n, useful, unsure, not_useful, and
    Theil's U(utility | task accuracy) and U(utility | Gen-U) where the units carry them."""
    values = g["utility"].to_numpy()
    n = int(values.size)
    out = {"n": n, **{UTILITY_NAMES[cat]: (float((values == cat).sum()) / n if n else None) for cat in UTILITY_ORDER}}
    for label, column in (("task_accuracy", "task_correct"), ("gen_u", "gen_u")):
        if column in g:
            sub = g.dropna(subset=[column])
            out[f"theils_u_utility_given_{label}"] = (
                metrics.theils_u(sub["utility"].to_numpy(), sub[column].astype(int).to_numpy()) if len(sub) else None)
    return out


def tie_counts(units: pd.DataFrame) -> dict:
    """How many of ``units`` (:func:`unit_outcomes`' rows) have no majority answer before and after
    the rationale (a tie, or under the strict reading no label with more than half: counted wrong,
    SPEC section 2): ``no_majority_before``, ``no_majority_after``. The one count of a group's ties,
    for the utility shares and the majority readings alike."""
    return {"no_majority_before": int(units["before_tie"].sum()), "no_majority_after": int(units["after_tie"].sum())}


def utility_shares(frame: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   ties: bool = True) -> dict:
    """Shares of useful / unsure / not useful per source and over all sources, each with a
    percentile bootstrap 95% interval (SPEC section 2; the interval is our choice, SPEC asks for none),
    and (``ties``, where the units carry them) the units without a majority before and after the
    rationale (:func:`tie_counts`): SPEC asks how many ties there were, and a source whose not-useful
    share comes from ties reads apart from one whose answers were wrong."""
    out = {}
    groups = [(str(name), g) for name, g in frame.groupby("source", sort=True)]
    groups.append((ALL, frame))
    with_ties = ties and {"before_tie", "after_tie"} <= set(frame.columns)
    for name, g in groups:
        values = g["utility"].to_numpy()
        cis = metrics.share_cis(values, UTILITY_ORDER, n_resamples=n_resamples, seed=seed)
        row: dict = {"n": int(values.size)}
        for cat in UTILITY_ORDER:
            share, lo, hi = cis[cat]
            row[UTILITY_NAMES[cat]] = share
            row[f"{UTILITY_NAMES[cat]}_ci"] = [lo, hi]
        if with_ties:
            row.update(tie_counts(g))
        out[name] = row
    return out


def _per_source(frame: pd.DataFrame, func, columns: list[str]) -> dict:
    out = {}
    sub = frame.dropna(subset=columns)
    for name, g in sub.groupby("source", sort=True):
        out[str(name)] = func(g) if len(g) else None
    out[ALL] = func(sub) if len(sub) else None
    return out


def theils_u_utility_given(frame: pd.DataFrame, column: str) -> dict:
    """Theil's U(utility | ``column``) per source and over all sources (``ALL``), on the rows that
    have a value of ``column``."""
    return _per_source(
        frame, lambda g: metrics.theils_u(g["utility"].to_numpy(), g[column].astype(int).to_numpy()), [column]
    )


# Why a cell of U(utility | X) says nothing (``theils_u_degenerate``): SPEC's U is 1 when H(utility) = 0,
# which it is when the cell's utility never varies, and always with fewer than 2 units.
THEILS_U_UTILITY_CONSTANT = "utility_constant"
THEILS_U_FEWER_THAN_2 = "fewer_than_2_units"


def theils_u_degenerate(frame: pd.DataFrame, column: str) -> dict:
    """The cells (source, or ``ALL``) of :func:`theils_u_utility_given` whose U is 1 by definition
    because H(utility) = 0 there: ``THEILS_U_FEWER_THAN_2`` (one unit) or ``THEILS_U_UTILITY_CONSTANT``
    (utility never varies). Their values stay as computed; the report says they say nothing."""
    sub = frame.dropna(subset=[column])
    out = {}
    for name, g in [(str(name), g) for name, g in sub.groupby("source", sort=True)] + [(ALL, sub)]:
        if len(g) == 1:
            out[name] = THEILS_U_FEWER_THAN_2
        elif len(g) > 1 and g["utility"].nunique() < 2:
            out[name] = THEILS_U_UTILITY_CONSTANT
    return out


def associations(frame: pd.DataFrame, *, both_directions: bool = False) -> tuple[dict, list[str]]:
    """Theil's U of utility against task accuracy and Gen-U, and the correlation ratio of utility
    against similarity, per source and combined (SPEC section 3). Rows without the
    predictor are dropped (and named in the warnings). ``theils_u_degenerate``: {U key: {cell: why}},
    the cells of U(utility | X) that are 1 by definition (:func:`theils_u_degenerate`), when any."""
    out: dict = {}
    warnings: list[str] = []
    predictors = {"task_accuracy": ("task_correct", "task accuracy (predicted answer)"), "gen_u": ("gen_u", "Gen-U")}
    for label, (col, human) in predictors.items():
        if col not in frame or frame[col].notna().sum() == 0:
            warnings.append(f"No {human} available for any unit: Theil's U of utility given {label} is not computed.")
            continue
        missing = frame.loc[frame[col].isna(), "source"].value_counts()
        for source, n in missing.items():
            warnings.append(f"Source {source}: {int(n)} units have no {human}; they are left out of its Theil's U.")
        out[f"theils_u_utility_given_{label}"] = theils_u_utility_given(frame, col)
        if degenerate := theils_u_degenerate(frame, col):
            out.setdefault("theils_u_degenerate", {})[f"theils_u_utility_given_{label}"] = degenerate
        if both_directions:
            out[f"theils_u_{label}_given_utility"] = _per_source(
                frame, lambda g, c=col: metrics.theils_u(g[c].astype(int).to_numpy(), g["utility"].to_numpy()), [col]
            )
    if "similarity" in frame and frame["similarity"].notna().any():
        out["correlation_ratio_utility_similarity"] = _per_source(
            frame, lambda g: metrics.correlation_ratio(g["utility"].to_numpy(), g["similarity"].to_numpy(float)),
            ["similarity"],
        )
        sub = frame.dropna(subset=["similarity"])
        quintiles = similarity_bins(sub, SIMILARITY_BINS)
        out["theils_u_utility_given_similarity_quintile"] = quintiles.pop("theils_u")
        out["similarity_binning"] = {
            "rule": SIMILARITY_BINNING_RULE, **quintiles,
            "other_readings": {f"{q}_bins": similarity_bins(sub, q) for q in SIMILARITY_OTHER_BINS},
        }
    return out, warnings


# U(utility | binned similarity): SPEC says "binned similarity" and leaves the bins open. The
# published figure uses quintiles; the other readings (3 and 10 bins) are given beside it.
SIMILARITY_BINS = 5
SIMILARITY_OTHER_BINS = (3, 10)
SIMILARITY_BINNING_RULE = ("equal-count bins of similarity over all sources' units (pandas qcut); bins whose edges "
                           "coincide (tied similarities) are merged, so fewer bins than asked can be used")


def similarity_bins(sub: pd.DataFrame, q: int) -> dict:
    """Theil's U(utility | similarity in ``q`` equal-count bins) over all sources, with the bins
    asked for, the bins used (fewer when edges coincide) and their edges."""
    bins, edges = pd.qcut(sub["similarity"].astype(float), q=q, labels=False, retbins=True, duplicates="drop")
    return {"bins_asked": q, "bins_used": max(len(edges) - 1, 0), "edges": [float(e) for e in edges],
            "theils_u": {ALL: metrics.theils_u(sub["utility"].to_numpy(), bins.to_numpy())}}


# Which sources each ``all`` figure pools (``all_sources``): every source with a value of the figure's
# column. SPEC section 3's over-all figures pool the LMs only (gold rationales are the reference
# similarity is measured against, so a gold source has no similarity: ``score._similarity``); the
# utility and task-accuracy ``all`` rows keep every source, a gold one included, and where one is
# among them the reading without it is given beside (``other_readings.without_gold_sources``).
ALL_POOLS = {"utility_shares": "utility", "task_accuracy": "task_correct",
             "theils_u_utility_given_task_accuracy": "task_correct", "theils_u_utility_given_gen_u": "gen_u",
             "correlation_ratio_utility_similarity": "similarity",
             "theils_u_utility_given_similarity_quintile": "similarity"}
ALL_SOURCES_RULE = ("an all row pools every source with a value of its measure, a gold-kind source included; a gold "
                    "source has no similarity (its rationale is the gold one), so the correlation ratio and U(utility "
                    "| similarity quintile) pool the other sources only")
WITHOUT_GOLD_SOURCES = "without_gold_sources"
WITHOUT_GOLD_SOURCES_RULE = "the all rows over every source but the gold-kind ones (SPEC section 3 pools the LMs)"


def all_sources(frame: pd.DataFrame, gold: Iterable[str], *, n_resamples: int = DEFAULT_RESAMPLES) -> dict:
    """``all_sources``: which sources each measure's ``all`` pools (``by_measure``, ``ALL_POOLS``), the
    gold-kind ones among the frame's (``gold_sources``), and where a gold source is pooled, the
    ``all`` figures without it (``other_readings.without_gold_sources``: utility shares, task
    accuracy, U given task accuracy and Gen-U)."""
    names = frame["source"].astype(str)
    gold_sources = sorted(set(gold) & set(names))
    by_measure = {key: sorted(set(names[frame[column].notna()])) for key, column in ALL_POOLS.items()
                  if column in frame and frame[column].notna().any()}
    out: dict = {"rule": ALL_SOURCES_RULE, "gold_sources": gold_sources, "by_measure": by_measure}
    if not any(set(gold_sources) & set(pooled) for pooled in by_measure.values()):
        return out
    rest = frame[~names.isin(gold_sources)]
    reading: dict = {"rule": WITHOUT_GOLD_SOURCES_RULE, "sources": sorted(set(rest["source"].astype(str))),
                     "n_units": int(len(rest))}
    if len(rest):
        reading["utility_shares"] = {ALL: utility_shares(rest, n_resamples=n_resamples)[ALL]}
        reading["task_accuracy"] = {ALL: task_accuracy(rest).get(ALL)} if "task_correct" in rest else {}
        for label, column in (("task_accuracy", "task_correct"), ("gen_u", "gen_u")):
            if column in rest and rest[column].notna().any():
                reading[f"theils_u_utility_given_{label}"] = {ALL: theils_u_utility_given(rest, column)[ALL]}
    out["other_readings"] = {WITHOUT_GOLD_SOURCES: reading}
    return out


def task_accuracy(frame: pd.DataFrame) -> dict:
    if "task_correct" not in frame:
        return {}
    return _per_source(frame, lambda g: float(g["task_correct"].astype(bool).mean()), ["task_correct"])


# What agreement's "unit" is (SPEC section 2 says "over the raw annotations" and leaves it open):
# the published figure rates each scored unit, i.e. one (item, source) pair (a generalization
# study: one (question, source) pair); the other reading pools an item's before answers over its
# sources (they were given without any rationale, so every source's raters answered the same thing).
AGREEMENT_UNIT = {"item_id": "(item, source): the answers to one item with one source's rationale",
                  "question_id": "(generalization question, source): the answers to one question with one "
                                 "source's rationale"}
AGREEMENT_BY_ITEM = {"item_id": "item: an item's before answers under every source together (before the rationale "
                                "all sources' raters answered the same question)",
                     "question_id": "generalization question: its before answers under every source together"}
FLEISS_FULL_UNITS = "Fleiss' kappa over the units with the most common number of raters only"
# A study that stopped units early (``Study.stop_when_decided``, some unit's quota lowered below the
# study's annotators per unit): a unit stops once its result is decided, which is when its answers
# agree, so every agreement figure over the answers collected reads higher than the full design's.
EARLY_STOPPING_AGREEMENT_BIAS = (
    "Biased upward by early stopping: a unit stopped collecting once its result was decided, which happens "
    "when its answers agree (a yes/no unit of 5 stopped at 3 answers is 3-0 on both steps), so the answers "
    "never collected are those that could have disagreed. filled_units gives the same figures over the units "
    "that filled to the study's annotators per unit; those are the units that did not agree early, so that "
    "reading leans the other way: neither is what the full design would give.")
FILLED_UNITS_RULE = ("only the answers of units that filled to the study's annotators per unit (not stopped early); "
                     "a reading beside the one over the answers collected, which early stopping biases upward")


def _filled_units_row(units: pd.Series, labels: pd.Series, designed: int) -> dict:
    """Agreement over the answers of the units that filled (``FILLED_UNITS_RULE``): the same row as
    :func:`_agreement_row` with the rule and the number of raters a filled unit has."""
    head = {"rule": FILLED_UNITS_RULE, "raters": designed}
    if not len(labels):
        return head | {"n_units": 0, "n_annotations": 0, "n_units_alpha": 0, "n_units_single_answer": 0,
                       "krippendorff_alpha": None, "fleiss_kappa": None}
    return head | _agreement_row(units, labels)


def _agreement_row(units: pd.Series, labels: pd.Series, *, filled: pd.Series | None = None,
                   designed: int | None = None) -> dict:
    """Agreement of one step's answers (``units[i]`` rated ``labels[i]``): alpha and the units it
    used (those with two answers or more: a single answer adds nothing), Fleiss' kappa when every
    unit has as many raters, and otherwise kappa over the units with the most common count.

    ``filled`` (one flag per answer: its unit filled to ``designed``, the study's annotators per
    unit), given where the study stopped units early (:func:`_stopped_design`): the row says the
    figures are biased upward (``early_stopping_bias``), gives them over the filled units
    (``filled_units``) and leaves out the most-common-count kappa, whose units may be stopped ones
    (at 3 of 5 yes/no answers: unanimous by construction, so kappa 1.0 by the stopping rule)."""
    counts = metrics.value_counts_matrix(units, labels)
    raters = counts.sum(axis=1)
    row = {"n_units": int(counts.shape[0]), "n_annotations": int(len(labels)),
           "n_units_alpha": int((raters >= 2).sum()),
           "n_units_single_answer": int((raters < 2).sum())}
    row["krippendorff_alpha"] = alpha_from_counts(counts)
    uniform = bool(counts.shape[0]) and bool((raters == raters[0]).all())
    if uniform and (filled is None or raters[0] >= designed):
        row["fleiss_kappa"] = kappa_from_counts(counts)
    elif filled is not None and uniform:
        row["fleiss_kappa"] = None
        row["fleiss_kappa_note"] = (
            f"Not computed: every unit has {int(raters[0])} raters, fewer than the study's {designed}, because the "
            "study stopped them early, and their answers agree by the stopping rule (kappa 1.0 by construction); "
            f"see filled_units for kappa over the units that filled to {designed} raters.")
    elif filled is not None:
        row["fleiss_kappa"] = None
        row["fleiss_kappa_note"] = (
            f"Not computed over all units: units have different numbers of raters "
            f"({', '.join(str(int(r)) for r in sorted(set(raters.tolist())))}), because the study stopped units "
            f"early. Kappa over the units with the most common number of raters is left out: those can be units "
            f"stopped early, whose answers agree by the stopping rule (kappa 1.0 by construction); see filled_units "
            f"for kappa over the units that filled to {designed} raters.")
    else:
        row["fleiss_kappa"] = None
        sizes = np.bincount(raters)
        k = int(len(sizes) - 1 - np.argmax(sizes[::-1]))  # most common count; the larger on a draw
        kappa = kappa_from_counts(counts[raters == k]) if k >= 2 else None
        row["fleiss_kappa_full_units"] = {"rule": FLEISS_FULL_UNITS, "raters": k,
                                          "n_units": int((raters == k).sum()) if k >= 2 else 0,
                                          "fleiss_kappa": kappa}
        row["fleiss_kappa_note"] = (f"Not computed over all units: units have different numbers of raters "
                                    f"({', '.join(str(int(r)) for r in sorted(set(raters.tolist())))}); "
                                    f"over the {row['fleiss_kappa_full_units']['n_units']} units with {k} raters: "
                                    + ("not computable" if kappa is None or kappa != kappa else f"{kappa:.4f}") + ".")
    if filled is not None:
        keep = filled.to_numpy(dtype=bool)
        row["early_stopping_bias"] = EARLY_STOPPING_AGREEMENT_BIAS
        row["filled_units"] = _filled_units_row(units[keep], labels[keep], designed)
    return row


def task_accuracy_n(frame: pd.DataFrame) -> dict:
    """How many units each source's task accuracy is over: the scored units (those with an answer)
    that have the source's predicted answer; units no one has answered yet are not in it."""
    has = frame.dropna(subset=["task_correct"])
    counts = {str(k): int(v) for k, v in has["source"].value_counts().sort_index().items()}
    return {**counts, ALL: int(len(has))}


def _unit_key(units: pd.DataFrame | None) -> str | None:
    return next((k for k in ("question_id", "item_id") if units is not None and k in units), None)


def _stopped_design(units: pd.DataFrame | None, expected_raters: int | None) -> int | None:
    """The study's annotators per unit where it stopped units early: ``units`` has each unit's own
    number (``expected_raters``, its quota: a study that stops units early) and some unit's is below
    the design's ``expected_raters``; None otherwise (then agreement is as it always was)."""
    if units is None or expected_raters is None or "expected_raters" not in units:
        return None
    return int(expected_raters) if bool((units["expected_raters"] < expected_raters).any()) else None


def _filled(a: pd.DataFrame, designed: int | None) -> pd.Series | None:
    """Per answer of ``a`` (one step's): whether its unit has the design's ``designed`` answers."""
    if designed is None:
        return None
    return a["unit_id"].map(a.groupby("unit_id", observed=True).size()) >= designed


def agreement(annotations: pd.DataFrame, units: pd.DataFrame | None = None, *,
              expected_raters: int | None = None) -> dict:
    """Krippendorff's alpha (nominal) over the raw answers of each step; Fleiss' kappa when every
    unit has the same number of answers (SPEC section 2). With ``units`` (``unit_id`` and
    ``item_id`` or ``question_id``) each step's row names its ``unit`` (``AGREEMENT_UNIT``). Where
    the study stopped units early (``_stopped_design``: ``units``' ``expected_raters`` below the
    design's ``expected_raters``) each row says so and gives the filled units' reading
    (:func:`_agreement_row`)."""
    out = {}
    key = _unit_key(units)
    designed = _stopped_design(units, expected_raters)
    for step in ("before", "after"):
        a = annotations[(annotations["step"] == step) & annotations["answer"].notna() & (annotations["answer"] != "")]
        if a.empty:
            continue
        # Series, not arrays: a categorical answer column is counted by its codes
        out[step] = ({"unit": AGREEMENT_UNIT[key]} if key else {}) | _agreement_row(
            a["unit_id"], a["answer"], filled=_filled(a, designed), designed=designed)
    return out


def agreement_by_item(annotations: pd.DataFrame, units: pd.DataFrame, *, expected_raters: int | None = None) -> dict:
    """The other reading of agreement (``AGREEMENT_BY_ITEM``): the before answers with the item (or
    generalization question) as the unit, every source's raters together. Empty without answers.
    Where the study stopped units early, as :func:`agreement` (filled: the answers of the (item,
    source) units that filled)."""
    key = _unit_key(units)
    a = annotations[(annotations["step"] == "before") & annotations["answer"].notna() & (annotations["answer"] != "")]
    if key is None or a.empty:
        return {}
    item = a["unit_id"].map(units.set_index("unit_id")[key])
    keep = item.notna().to_numpy()
    if not keep.any():
        return {}
    designed = _stopped_design(units, expected_raters)
    filled = _filled(a, designed)
    return {"before": {"unit": AGREEMENT_BY_ITEM[key],
                       **_agreement_row(item[keep], a["answer"][keep],
                                        filled=None if filled is None else filled[keep], designed=designed)}}


# Units short of annotators are scored on the answers they have; the other reading scores only
# the units with all the answers they need.
FULL_UNITS_RULE = ("only the units with every answer they need (the study's annotators per unit, or a unit stopped "
                   "early: those it held when it was decided)")


def short_units(frame: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES) -> dict:
    """Units scored short of annotators, per source and over all, and the utility shares of the
    full units only (``FULL_UNITS_RULE``); ``None`` shares when no unit is short (they are the
    published ones)."""
    short = frame["short"] if "short" in frame else pd.Series(False, index=frame.index)
    counts = {str(k): int(v) for k, v in frame.loc[short, "source"].value_counts().sort_index().items()}
    for name in frame["source"].unique():
        counts.setdefault(str(name), 0)
    counts = dict(sorted(counts.items()))
    counts[ALL] = int(short.sum())
    full = frame.loc[~short]
    return {"n_short_by_source": counts, "full_units_rule": FULL_UNITS_RULE,
            "utility_shares_full_units_only": (utility_shares(full, n_resamples=n_resamples)
                                               if short.any() and len(full) else None)}


@dataclass
class Part:
    """One step's share of a scoring run: its keys of ``results.json`` (in the order they are
    published), its warnings, and the per-unit table when the step makes or extends one. Steps
    return parts; :func:`merge` puts them together, so a key of the results is found where the step
    that computes it returns it."""

    results: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    frame: pd.DataFrame | None = None


def merge(parts: Iterable[Part], *, frame: pd.DataFrame | None = None) -> Part:
    """The parts one after the other: later keys after earlier ones, warnings in step order."""
    merged = Part(frame=frame)
    for part in parts:
        merged.results.update(part.results)
        merged.warnings.extend(part.warnings)
    return merged


def collected_outcomes(units: pd.DataFrame, annotations: pd.DataFrame, *, expected_raters: int,
                       by_item: bool = True) -> Part:
    """The per-unit table of a study's collected answers (:func:`unit_outcomes`) with ``n_units``,
    ``ties``, ``agreement`` and (unless ``by_item`` is false) ``agreement_by_item``."""
    frame, warnings, ties = unit_outcomes(units, annotations, expected_raters=expected_raters)
    results = {
        "n_units": int(len(units)),
        "ties": ties,
        "agreement": agreement(annotations, units, expected_raters=expected_raters) if not annotations.empty else {},
    }
    if by_item:
        results["agreement_by_item"] = (agreement_by_item(annotations, units, expected_raters=expected_raters)
                                        if not annotations.empty else {})
    return Part(results, warnings, frame)


def score_units(
    outcomes: Part,
    *,
    annotate: Callable[[pd.DataFrame], Part] | None = None,
    both_directions: bool = False,
    n_resamples: int = DEFAULT_RESAMPLES,
) -> Part:
    """A utility study's scores from its per-unit outcomes (collected or imported): ``annotate``
    adds per-unit columns from outside the frames (``study_score``: task accuracy, Gen-U,
    similarity) with their part of the results, then the summaries (:func:`summarise_units`)."""
    parts = [outcomes]
    frame = outcomes.frame
    if annotate is not None:
        parts.append(annotated := annotate(frame))
        frame = annotated.frame
    parts.append(summarise_units(frame, both_directions=both_directions, n_resamples=n_resamples))
    return merge(parts, frame=frame)


def as_categories(annotations: pd.DataFrame) -> pd.DataFrame:
    """``annotations`` with ``step`` and ``answer`` as categoricals (the same values; grouping and
    counting then read their codes, which is what makes a reading of the answers cheap)."""
    cols = {c: annotations[c].astype("category") for c in ("step", "answer")
            if c in annotations and not isinstance(annotations[c].dtype, pd.CategoricalDtype)}
    return annotations.assign(**cols) if cols else annotations


def score_frames(
    units: pd.DataFrame,
    annotations: pd.DataFrame,
    *,
    expected_raters: int,
    annotate: Callable[[pd.DataFrame], Part] | None = None,
    both_directions: bool = False,
    n_resamples: int = DEFAULT_RESAMPLES,
    what: str = "The study",
    by_item: bool = True,
) -> Part:
    """The utility study's composition from the raw frames, the one ``study_score`` runs on a
    study's rows and the benchmark (``benchmarks/scoring``) measures on synthetic ones: majorities
    and utility per unit, ties, agreement, then :func:`score_units`. Raises ``ScoringError``
    (``what`` names the study) when no unit has a completed answer. ``by_item`` false leaves out
    the by-item agreement (:func:`other_readings` does: it is not asked of a reading, and costly)."""
    annotations = as_categories(annotations)
    outcomes = collected_outcomes(units, annotations, expected_raters=expected_raters, by_item=by_item)
    if outcomes.frame.empty:
        raise ScoringError(f"{what} has no completed answers yet; nothing to score.")
    return score_units(outcomes, annotate=annotate, both_directions=both_directions, n_resamples=n_resamples)


def summarise_units(frame: pd.DataFrame, *, both_directions: bool = False, n_resamples: int = DEFAULT_RESAMPLES) -> Part:
    """Summaries that need only the per-unit table (collected and imported outcomes alike)."""
    results: dict = {"n_units_scored": int(len(frame))}
    results["utility_shares"] = utility_shares(frame, n_resamples=n_resamples)
    if "short" in frame:  # collected answers (imported outcomes hold only the majorities)
        results["short_units"] = short_units(frame, n_resamples=n_resamples)
    results["task_accuracy"] = task_accuracy(frame)
    if "task_correct" in frame:
        results["task_accuracy_n"] = task_accuracy_n(frame)
    assoc, warnings = associations(frame, both_directions=both_directions)
    results.update(assoc)
    if "gen_u" in frame and frame["gen_u"].notna().any():
        sub = frame.dropna(subset=["gen_u"]).copy()
        sub["utility"] = sub["gen_u"].astype(int)
        results["gen_u_shares"] = utility_shares(sub, n_resamples=n_resamples, ties=False)  # no majority of Gen-U
    return Part(results, warnings)


# --- other readings of which answers count ------------------------------------------------------

# What each other reading of the counted answers reports (the rest of the composition is the same).
READING_KEYS = ("n_units_scored", "ties", "utility_shares", "task_accuracy", "task_accuracy_n",
                "theils_u_utility_given_task_accuracy", "theils_u_utility_given_gen_u",
                "correlation_ratio_utility_similarity", "agreement")


def other_readings(units: pd.DataFrame, annotations: pd.DataFrame, keep: dict[str, np.ndarray], published: Part, *,
                   expected_raters: int, n_resamples: int = DEFAULT_RESAMPLES) -> dict:
    """The published composition (:func:`score_frames`) on other subsets of the answers: ``keep``
    maps a reading's name to a boolean mask over ``annotations``. The per-unit columns that do not
    depend on the answers (task accuracy, Gen-U, similarity) are taken from ``published.frame``.
    A reading that keeps every answer, or the same answers as an earlier one, is not computed
    again: it says ``identical_to`` and repeats those figures."""
    columns = [c for c in ("task_correct", "gen_u", "similarity") if c in published.frame]
    per_unit = published.frame[["unit_id", *columns]]

    def annotate(frame: pd.DataFrame) -> Part:
        return Part(frame=frame.drop(columns=[c for c in columns if c in frame]).merge(per_unit, on="unit_id",
                                                                                          how="left"))

    def pick(results: dict) -> dict:
        return {k: results[k] for k in READING_KEYS if k in results}

    annotations = as_categories(annotations)
    out: dict = {}
    done: list[tuple[str, np.ndarray]] = []
    for name, mask in keep.items():
        mask = np.asarray(mask, dtype=bool)
        row: dict = {"n_answers": int(mask.sum()), "answers_left_out": int((~mask).sum())}
        same = next((earlier for earlier, m in done if np.array_equal(m, mask)), None)
        if mask.all():
            row.update(identical_to="published", **pick(published.results))
        elif same is not None:
            # its figures, or the note saying why it has none (a reading that scored nothing)
            row.update({k: v for k, v in out[same].items() if k in (*READING_KEYS, "note")}, identical_to=same)
        elif not mask.any():
            row["identical_to"] = None
            row["note"] = "No answers are left under this reading; nothing to score."
        else:
            try:
                part = score_frames(units, annotations.loc[mask], expected_raters=expected_raters, annotate=annotate,
                                    n_resamples=n_resamples, by_item=False)
            except ScoringError as exc:
                row.update(identical_to=None, note=str(exc))
            else:
                row.update(identical_to=None, **pick(part.results))
        out[name] = row
        done.append((name, mask))
    return out


# --- Gen-U and bundles --------------------------------------------------------------------------


# Which bundle size relative consistency is computed on when bundles differ in size (RC, SPEC
# section 5, is defined for bundles of one size): said in the results next to the figure. SPEC's
# RC is for bundles of 2 or more (its formula is for size 2, then size k): a bundle of one instance
# is consistent exactly when it is right, so consistency is accuracy there and RC is 1 by
# definition. Sizes of 1 are not considered; with no larger bundle RC is not given and the reason
# is named (``rc_degenerate``), as U's cells of constant utility are (``theils_u_degenerate``).
RC_ONE_INSTANCE = "one_instance_bundles"
RC_SIZE_RULE = ("the most common bundle size; between sizes equally common, the largest (the most instances); "
                "sizes of 1 are not considered (a bundle of one instance is consistent exactly when it is right, "
                "so its relative consistency is 1 by definition), and with no bundle of 2 or more instances "
                "relative consistency is not given (rc_degenerate: one_instance_bundles); "
                "every size's relative consistency is given as well (rc_by_bundle_size)")


def rc_bundle_size(sizes: pd.Series) -> int | None:
    """The bundle size RC is computed on (``RC_SIZE_RULE``) from each bundle's size: among sizes of
    2 or more; None when every bundle has one instance."""
    counts = sizes[sizes >= 2].value_counts()
    if counts.empty:
        return None
    return int(max(counts.index[counts == counts.max()]))


def _rc_figures(n: int, a: int, c: int, k: int) -> dict:
    """Accuracy, consistency and RC of ``n`` bundles of size ``k`` with ``a`` correct instances and
    ``c`` consistent bundles; an infeasible input (never for counted data) keeps its message. At
    size 1 RC is 1 by definition: not given, ``rc_degenerate`` says why (``RC_ONE_INSTANCE``)."""
    out = {"n_bundles": n, "accuracy": a / (n * k), "consistency": c / n}
    if k == 1:
        out["relative_consistency"] = None
        out["rc_degenerate"] = RC_ONE_INSTANCE
        return out
    try:
        out["relative_consistency"] = metrics.relative_consistency(n, a, c, bundle_size=k)
    except ValueError as exc:
        out["relative_consistency"] = None
        out["rc_note"] = str(exc)
    return out


def bundle_consistency(correct: pd.Series, bundle: pd.Series) -> dict:
    """Consistency over bundles and, where the bundle sizes allow, relative consistency.

    RC (SPEC section 5) is defined for bundles of one size. When sizes differ, RC is computed over
    the bundles of one size, chosen by ``RC_SIZE_RULE`` (``rc_size_rule``), and says so: that
    subset's ``rc_bundle_size``, ``rc_n_bundles``, ``rc_accuracy`` and ``rc_consistency`` (the
    figures RC is relative to; ``accuracy`` and ``consistency`` cover every bundle), and
    ``rc_by_bundle_size``: the same figures for every size. Bundles of one instance are not
    considered (their RC is 1 by definition): when every bundle has one, ``relative_consistency``
    and the subset's figures are None and ``rc_degenerate`` is ``RC_ONE_INSTANCE``."""
    df = pd.DataFrame({"correct": correct.astype(bool).to_numpy(), "bundle": bundle.to_numpy()})
    if df.empty:
        return {"n_bundles": 0, "consistency": None, "relative_consistency": None}
    g = df.groupby("bundle", sort=False)["correct"].agg(["size", "sum"])
    out: dict = {
        "n_bundles": int(len(g)),
        "n_instances": int(g["size"].sum()),
        "accuracy": float(g["sum"].sum() / g["size"].sum()),
        "consistency": float((g["sum"] == g["size"]).mean()),
    }
    by_size = {int(size): _rc_figures(len(same), int(same["sum"].sum()), int((same["sum"] == size).sum()), int(size))
               for size, same in g.groupby("size", sort=True)}
    out["rc_size_rule"] = RC_SIZE_RULE
    out["rc_by_bundle_size"] = {str(s): v for s, v in by_size.items()}
    k = rc_bundle_size(g["size"])
    if k is None:
        out.update(rc_bundle_size=None, rc_n_bundles=None, rc_accuracy=None, rc_consistency=None,
                   relative_consistency=None, rc_degenerate=RC_ONE_INSTANCE)
        return out
    chosen = by_size[k]
    out["rc_bundle_size"] = k
    out["rc_n_bundles"] = chosen["n_bundles"]
    out["rc_accuracy"] = chosen["accuracy"]
    out["rc_consistency"] = chosen["consistency"]
    if len(by_size) > 1:
        sizes = ", ".join(f"{v['n_bundles']} of size {s}" for s, v in by_size.items())
        out["rc_note"] = (
            f"Bundle sizes differ ({sizes}); "
            f"relative consistency is computed over the {chosen['n_bundles']} bundles of size {k} "
            f"(accuracy {chosen['accuracy']:.3f}, consistency {chosen['consistency']:.3f} there)"
            + ("; bundles of size 1 are not considered (their relative consistency is 1 by definition)."
               if 1 in by_size else ".")
        )
    out["relative_consistency"] = chosen["relative_consistency"]
    if "rc_note" in chosen:  # cannot happen for counted data; keep the message if it does
        out["rc_note"] = chosen["rc_note"]
    return out
