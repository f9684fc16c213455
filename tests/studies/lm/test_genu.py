"""The Gen-U definition (studies.lm.genu): per-question score, the mode's tie rule, unparseable
answers left out, and the vectorised form agreeing with the scalar one."""
import itertools
import random
from collections import Counter

import pandas as pd
import pytest

from studies.lm import genu
from studies.services.generation.questions import no_question_reason


def test_question_score_table():
    assert genu.question_score(i_correct=False, ir_correct=True) == 1
    assert genu.question_score(i_correct=True, ir_correct=True) == 0
    assert genu.question_score(i_correct=True, ir_correct=False) == -1
    assert genu.question_score(i_correct=False, ir_correct=False) == -1


def test_ties_go_to_the_lowest_score_and_the_rule_is_stated():
    assert genu.mode_score([1, 0]) == 0 and genu.mode_score([1, -1, 0]) == -1 and genu.mode_score([1, 1, 0]) == 1
    assert genu.TIE_RULE == "lowest" and "as SPEC section 4 says" in genu.TIE_RULE_TEXT
    with pytest.raises(ValueError):
        genu.mode_score([])


def frame(rows):
    return pd.DataFrame(rows, columns=["question_id", "item_id", "source", "answerer", "correct", "parsed"])


def test_unparseable_answers_are_left_out_and_counted():
    rows = []
    for q in range(3):  # F^I did not parse, F^IR right: the old rule scored these +1
        rows += [(q, 1, "s", "I", False, False), (q, 1, "s", "IR", True, True)]
    rows += [(10, 1, "s", "I", True, True), (10, 1, "s", "IR", True, True)]  # scores 0
    rows += [(11, 1, "s", "I", True, True)]  # no F^IR prediction
    per_q, per_item, counts, warnings = genu.genu_frame(frame(rows))
    assert per_item[genu.ITEM_COLUMNS].to_dict("records") == [{"item_id": 1, "source": "s", "gen_u": 0, "n_questions": 1}]
    assert list(per_q["question_id"]) == [10]
    assert counts["s"] == {"questions": 5, "unparseable_i_answers": 3, "unparseable_ir_answers": 0,
                           "questions_left_out_unparseable": 3, "questions_left_out_incomplete": 1}
    assert len(warnings) == 2


def test_vectorised_gen_u_agrees_with_the_scalar_definition_under_every_tie_rule():
    rng = random.Random(0)
    rows, expected, qid = [], {}, itertools.count()
    for item in range(300):
        scores = []
        for _ in range(rng.randint(1, 7)):
            q, i_ok, ir_ok = next(qid), rng.random() < 0.5, rng.random() < 0.6
            rows += [(q, item, "s", "I", i_ok, True), (q, item, "s", "IR", ir_ok, True)]
            scores.append(genu.question_score(i_ok, ir_ok))
        expected[item] = {rule: genu.mode_score(scores, rule) for rule in genu.TIE_RULES}
        counts = list(Counter(scores).values())
        expected[item]["tied"] = counts.count(max(counts)) > 1
    rng.shuffle(rows)  # "first" means first in question order, not in the order rows arrive
    _, per_item, _, _ = genu.genu_frame(frame(rows))
    assert dict(zip(per_item["item_id"], per_item["gen_u"], strict=True)) == {
        item: e[genu.TIE_RULE] for item, e in expected.items()}
    for rule in genu.TIE_RULES:
        assert dict(zip(per_item["item_id"], per_item[f"gen_u_{rule}"], strict=True)) == {
            item: e[rule] for item, e in expected.items()}, rule
    assert dict(zip(per_item["item_id"], per_item["tied"], strict=True)) == {
        item: e["tied"] for item, e in expected.items()}
    assert 0 < per_item["tied"].sum() < len(per_item)


def test_each_tie_rule_on_hand_made_scores():
    # -1 and +1 tie twice each; the first question scores 0, the second +1.
    scores = [0, 1, -1, 1, -1]
    assert [genu.mode_score(scores, rule) for rule in ("lowest", "highest", "first")] == [-1, 1, 1]
    assert genu.mode_score([0, 0, 1]) == 0 == genu.mode_score([0, 0, 1], "highest")  # no tie: every rule agrees
    with pytest.raises(ValueError, match="unknown Gen-U tie rule 'median'"):
        genu.mode_score(scores, "median")


def test_tie_rule_effect_counts_tied_items_and_gives_each_rule_its_figures():
    rows = []
    # item 1 (source a): -1, +1 tie -> lowest -1, highest +1, first +1 (question 1 scores +1)
    rows += [(1, 1, "a", "I", False, True), (1, 1, "a", "IR", True, True)]
    rows += [(2, 1, "a", "I", True, True), (2, 1, "a", "IR", False, True)]
    # item 2 (source a): two questions scoring 0, no tie
    rows += [(3, 2, "a", "I", True, True), (3, 2, "a", "IR", True, True)]
    rows += [(4, 2, "a", "I", True, True), (4, 2, "a", "IR", True, True)]
    # item 1 (source b): 0, -1 tie -> lowest -1, highest 0, first 0
    rows += [(5, 1, "b", "I", True, True), (5, 1, "b", "IR", True, True)]
    rows += [(6, 1, "b", "I", True, True), (6, 1, "b", "IR", False, True)]
    _, per_item, _, _ = genu.genu_frame(frame(rows))
    effect = genu.tie_rule_effect(per_item)
    assert (effect["a"]["n_items"], effect["a"]["n_tied"], effect["b"]["n_tied"]) == (2, 1, 1)
    assert effect["a"]["lowest"] == {"n": 2, "mean": -0.5, "useful": 0.0, "unsure": 0.5, "not_useful": 0.5}
    assert effect["a"]["highest"] == {"n": 2, "mean": 0.5, "useful": 0.5, "unsure": 0.5, "not_useful": 0.0}
    assert effect["a"]["first"] == effect["a"]["highest"]
    assert effect["a"][genu.TIES_LEFT_OUT] == {"n": 1, "mean": 0.0, "useful": 0.0, "unsure": 1.0, "not_useful": 0.0}
    assert (effect["b"]["highest"]["mean"], effect["b"]["first"]["mean"]) == (0.0, 0.0)
    assert effect["b"][genu.TIES_LEFT_OUT] == {"n": 0, "mean": None, "useful": None, "unsure": None,
                                               "not_useful": None}
    assert (effect["all"]["n_items"], effect["all"]["n_tied"]) == (3, 2)
    assert effect["all"]["lowest"]["mean"] == pytest.approx(-2 / 3)


def test_no_question_reason_counts_each_sample_once():
    # Five samples: two did not parse, three parsed and were dropped as duplicates. The old message
    # subtracted the dropped ones twice and said "unparseable: -1".
    reason = no_question_reason("rephrase", samples=5, unparseable=2, dropped={"empty": 0, "duplicate": 3})
    assert reason == ("no usable rephrase question from 5 samples (unparseable or not a question: 2; "
                      "dropped: duplicate 3)")
