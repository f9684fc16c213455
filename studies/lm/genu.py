"""Gen-U (SPEC section 4): the one definition of the per-question score, the mode and its tie
rule, and their vectorised form. Pure Python / pandas, no Django: the Gen-U answering service
(:mod:`studies.services.generation.genu`), scoring (``scoring.metrics.pipeline``, ``scoring.metrics``) and a trainer that
uses Gen-U as its reward all read it from here.

For generalization question i of item x, with F^I answering the question alone and F^IR the
question plus x's rationale::

    s_i = -1                        if F^IR is wrong
    s_i = 1 - 1[F^I is right]       otherwise (+1 or 0)
    Gen-U(x) = mode(s_1 .. s_n)

An answer that does not parse is neither right nor wrong: the question is left out of the mode
and counted (:func:`genu_frame` reports how many), rather than scored as a wrong answer, which
would push F^I failures toward +1 and F^IR failures toward -1.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

SCORES = (-1, 0, 1)
TIE_RULES = {
    "lowest": "the lowest tied score (-1 before 0 before +1)",
    "highest": "the highest tied score (+1 before 0 before -1)",
    "first": "the tied score of the item's first question (in question order) that has one",
}
TIE_RULE = "lowest"
TIE_RULE_TEXT = (
    "A tie in the mode of the per-question scores goes to the lowest score (-1 before 0 before +1), as SPEC "
    "section 4 says: break ties in the mode toward the lowest score (the conservative reading), and document it. "
    "The report shows the Gen-U figures under the other rules and with tied items left out."
)
TIES_LEFT_OUT = "ties_left_out"
ANSWERER_NAMES = {"I": "F^I", "IR": "F^IR"}


def question_score(i_correct: bool, ir_correct: bool) -> int:
    """s_i of one generalization question."""
    if not ir_correct:
        return -1
    return 0 if i_correct else 1


def mode_score(scores: Iterable[int], rule: str = TIE_RULE) -> int:
    """The mode of the per-question scores (in question order); a tie goes by ``rule``
    (:data:`TIE_RULES`; the default :data:`TIE_RULE` is stated in :data:`TIE_RULE_TEXT`)."""
    if rule not in TIE_RULES:
        raise ValueError(f"unknown Gen-U tie rule {rule!r}: choose one of {', '.join(TIE_RULES)}")
    ordered = [int(s) for s in scores]
    counts = Counter(ordered)
    if not counts:
        raise ValueError("gen_u: the item has no generalization questions with parsed answers")
    top = max(counts.values())
    tied = {score for score, n in counts.items() if n == top}
    if rule == "lowest":
        return min(tied)
    if rule == "highest":
        return max(tied)
    return next(s for s in ordered if s in tied)


# The table of question_score, for the vectorised form: index 2 * i_correct + ir_correct.
_SCORE_TABLE = np.array([question_score(bool(i), bool(ir)) for i in (0, 1) for ir in (0, 1)], dtype=np.int8)

QUESTION_COLUMNS = ["question_id", "item_id", "source", "i_correct", "ir_correct", "s"]
ITEM_COLUMNS = ["item_id", "source", "gen_u", "n_questions"]
TIE_COLUMNS = ["tied"] + [f"gen_u_{rule}" for rule in TIE_RULES]  # per item: is the mode tied, the mode by rule


def genu_frame(predictions: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict, list[str]]:
    """Gen-U per (item, source) from answerer predictions, vectorised.

    ``predictions``: one row per prediction with ``question_id``, ``item_id``, ``source``,
    ``answerer`` ("I" or "IR"), ``correct`` (bool) and ``parsed`` (bool; a missing column means
    every answer parsed). Returns the per-question frame (:data:`QUESTION_COLUMNS`), the per-item
    frame (:data:`ITEM_COLUMNS` with the default tie rule, then :data:`TIE_COLUMNS`), a summary ``{source: {"questions", "unparseable_i_answers",
    "unparseable_ir_answers", "questions_left_out_unparseable", "questions_left_out_incomplete"}}`` and
    warnings. Questions with only one answerer's prediction, or with an answer that did not
    parse, are left out of the mode and counted."""
    warnings: list[str] = []
    if predictions.empty:
        return pd.DataFrame(columns=QUESTION_COLUMNS), pd.DataFrame(columns=ITEM_COLUMNS + TIE_COLUMNS), {}, warnings
    preds = predictions.copy()
    if "parsed" not in preds:
        preds["parsed"] = True
    preds["parsed"] = preds["parsed"].astype(bool)
    index = ["question_id", "item_id", "source"]
    correct = preds.pivot_table(index=index, columns="answerer", values="correct", aggfunc="first")
    parsed = preds.pivot_table(index=index, columns="answerer", values="parsed", aggfunc="first")
    for frame in (correct, parsed):
        for col in ("I", "IR"):
            if col not in frame:
                frame[col] = np.nan
    incomplete = correct["I"].isna() | correct["IR"].isna()
    unparsed_i = parsed["I"].eq(False)
    unparsed_ir = parsed["IR"].eq(False)
    left_out = ~incomplete & (unparsed_i | unparsed_ir)
    summary: dict = {}
    sources = correct.index.get_level_values("source")
    for source in sorted(set(sources)):
        mask = sources == source
        summary[source] = {
            "questions": int(mask.sum()),
            "unparseable_i_answers": int(unparsed_i[mask].sum()),
            "unparseable_ir_answers": int(unparsed_ir[mask].sum()),
            "questions_left_out_unparseable": int(left_out[mask].sum()),
            "questions_left_out_incomplete": int(incomplete[mask].sum()),
        }
        row = summary[source]
        if row["questions_left_out_incomplete"]:
            warnings.append(
                f"Source {source}: {row['questions_left_out_incomplete']} generalization questions have only one of "
                "the F^I / F^IR predictions; they are left out of Gen-U."
            )
        if row["questions_left_out_unparseable"]:
            warnings.append(
                f"Source {source}: {row['questions_left_out_unparseable']} generalization questions are left out of "
                f"Gen-U because an answerer's output did not parse ({row['unparseable_i_answers']} F^I, "
                f"{row['unparseable_ir_answers']} F^IR answers)."
            )
    keep = ~(incomplete | left_out)
    wide = correct[keep].reset_index()
    if wide.empty:
        return pd.DataFrame(columns=QUESTION_COLUMNS), pd.DataFrame(columns=ITEM_COLUMNS + TIE_COLUMNS), summary, warnings
    wide["i_correct"] = wide["I"].astype(bool)
    wide["ir_correct"] = wide["IR"].astype(bool)
    wide["s"] = _SCORE_TABLE[2 * wide["i_correct"].to_numpy(int) + wide["ir_correct"].to_numpy(int)]
    counts = pd.crosstab([wide["item_id"], wide["source"]], wide["s"]).reindex(columns=list(SCORES), fill_value=0)
    per_item = _modes(wide, counts).reset_index()
    per_item["gen_u"] = per_item[f"gen_u_{TIE_RULE}"]
    return wide[QUESTION_COLUMNS], per_item[ITEM_COLUMNS + TIE_COLUMNS], summary, warnings


def _modes(wide: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Per (item, source): ``n_questions``, whether the mode is tied and the mode under each rule
    of :data:`TIE_RULES`, as :func:`mode_score` gives it (``wide`` is in question order)."""
    values = counts.to_numpy()
    top = values.max(axis=1, keepdims=True)
    at_top = values == top
    scores = np.array(SCORES)
    # The columns ascend (-1, 0, 1): argmax takes the first, i.e. lowest, tied score.
    lowest = scores[at_top.argmax(axis=1)]
    highest = scores[len(SCORES) - 1 - at_top[:, ::-1].argmax(axis=1)]
    key = ["item_id", "source"]
    tops = pd.DataFrame(at_top, index=counts.index, columns=list(SCORES)).stack()
    tops.index.names = [*key, "s"]
    marked = wide[[*key, "s"]].astype({"s": int}).join(tops.rename("at_top"), on=[*key, "s"])
    first = marked[marked["at_top"]].groupby(key, sort=False)["s"].first().reindex(counts.index)
    return pd.DataFrame({
        "n_questions": values.sum(axis=1), "tied": at_top.sum(axis=1) > 1,
        "gen_u_lowest": lowest, "gen_u_highest": highest, "gen_u_first": first.to_numpy(int),
    }, index=counts.index)


def _summary(values: pd.Series) -> dict:
    n = len(values)
    shares = {name: (float((values == score).sum() / n) if n else None)
              for score, name in ((1, "useful"), (0, "unsure"), (-1, "not_useful"))}
    return {"n": int(n), "mean": float(values.mean()) if n else None, **shares}


def tie_rule_effect(per_item: pd.DataFrame) -> dict:
    """What the tie rule does to the Gen-U figures, from :func:`genu_frame`'s per-item frame:
    per source and over all (``"all"``), the number of items and of tied items, and the shares
    (useful +1, unsure 0, not useful -1) and mean under each rule of :data:`TIE_RULES` and with
    the tied items left out (:data:`TIES_LEFT_OUT`)."""
    out: dict = {}
    groups = [(str(source), g) for source, g in per_item.groupby("source", sort=True)]
    if len(groups) != 1:
        groups.append(("all", per_item))
    for name, g in groups:
        tied = g["tied"].astype(bool)
        entry = {"n_items": int(len(g)), "n_tied": int(tied.sum())}
        for rule in TIE_RULES:
            entry[rule] = _summary(g[f"gen_u_{rule}"])
        entry[TIES_LEFT_OUT] = _summary(g.loc[~tied, f"gen_u_{TIE_RULE}"])
        out[name] = entry
    return out
