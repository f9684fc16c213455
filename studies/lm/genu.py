"""Gen-U (SPEC section 4): the one definition of the per-question score, the mode and its tie
rule, and their vectorised form. Pure Python / pandas, no Django: the Gen-U answering service
(:mod:`studies.services.genu`), scoring (``scoring.core``, ``scoring.metrics``) and a trainer that
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
TIE_RULE = "lowest"
TIE_RULE_TEXT = (
    "A tie in the mode of the per-question scores goes to the lowest score (-1 before 0 before +1). "
    "The paper does not state a tie rule; this is the conservative reading."
)
ANSWERER_NAMES = {"I": "F^I", "IR": "F^IR"}


def question_score(i_correct: bool, ir_correct: bool) -> int:
    """s_i of one generalization question."""
    if not ir_correct:
        return -1
    return 0 if i_correct else 1


def mode_score(scores: Iterable[int]) -> int:
    """The mode of the per-question scores, ties to the lowest (:data:`TIE_RULE_TEXT`)."""
    counts = Counter(int(s) for s in scores)
    if not counts:
        raise ValueError("gen_u: the item has no generalization questions with parsed answers")
    top = max(counts.values())
    return min(score for score, n in counts.items() if n == top)


# The table of question_score, for the vectorised form: index 2 * i_correct + ir_correct.
_SCORE_TABLE = np.array([question_score(bool(i), bool(ir)) for i in (0, 1) for ir in (0, 1)], dtype=np.int8)

QUESTION_COLUMNS = ["question_id", "item_id", "source", "i_correct", "ir_correct", "s"]
ITEM_COLUMNS = ["item_id", "source", "gen_u", "n_questions"]


def genu_frame(predictions: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict, list[str]]:
    """Gen-U per (item, source) from answerer predictions, vectorised.

    ``predictions``: one row per prediction with ``question_id``, ``item_id``, ``source``,
    ``answerer`` ("I" or "IR"), ``correct`` (bool) and ``parsed`` (bool; a missing column means
    every answer parsed). Returns the per-question frame (:data:`QUESTION_COLUMNS`), the per-item
    frame (:data:`ITEM_COLUMNS`), a summary ``{source: {"questions", "unparseable_i_answers",
    "unparseable_ir_answers", "questions_left_out_unparseable", "questions_left_out_incomplete"}}`` and
    warnings. Questions with only one answerer's prediction, or with an answer that did not
    parse, are left out of the mode and counted."""
    warnings: list[str] = []
    if predictions.empty:
        return pd.DataFrame(columns=QUESTION_COLUMNS), pd.DataFrame(columns=ITEM_COLUMNS), {}, warnings
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
        return pd.DataFrame(columns=QUESTION_COLUMNS), pd.DataFrame(columns=ITEM_COLUMNS), summary, warnings
    wide["i_correct"] = wide["I"].astype(bool)
    wide["ir_correct"] = wide["IR"].astype(bool)
    wide["s"] = _SCORE_TABLE[2 * wide["i_correct"].to_numpy(int) + wide["ir_correct"].to_numpy(int)]
    counts = pd.crosstab([wide["item_id"], wide["source"]], wide["s"]).reindex(columns=list(SCORES), fill_value=0)
    # argmax takes the first maximum and the columns ascend (-1, 0, 1): ties go to the lowest score,
    # as mode_score does.
    per_item = pd.DataFrame({
        "gen_u": np.array(SCORES)[counts.to_numpy().argmax(axis=1)],
        "n_questions": counts.sum(axis=1).to_numpy(),
    }, index=counts.index).reset_index()
    return wide[QUESTION_COLUMNS], per_item, summary, warnings
