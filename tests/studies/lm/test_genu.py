"""The Gen-U definition (studies.lm.genu): per-question score, the mode's tie rule, unparseable
answers left out, and the vectorised form agreeing with the scalar one."""
import itertools
import random

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
    assert genu.TIE_RULE == "lowest" and "does not state" in genu.TIE_RULE_TEXT
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
    assert per_item.to_dict("records") == [{"item_id": 1, "source": "s", "gen_u": 0, "n_questions": 1}]
    assert list(per_q["question_id"]) == [10]
    assert counts["s"] == {"questions": 5, "unparseable_i_answers": 3, "unparseable_ir_answers": 0,
                           "questions_left_out_unparseable": 3, "questions_left_out_incomplete": 1}
    assert len(warnings) == 2


def test_vectorised_gen_u_agrees_with_the_scalar_definition():
    rng = random.Random(0)
    rows, expected, qid = [], {}, itertools.count()
    for item in range(300):
        scores = []
        for _ in range(rng.randint(1, 7)):
            q, i_ok, ir_ok = next(qid), rng.random() < 0.5, rng.random() < 0.6
            rows += [(q, item, "s", "I", i_ok, True), (q, item, "s", "IR", ir_ok, True)]
            scores.append(genu.question_score(i_ok, ir_ok))
        expected[item] = genu.mode_score(scores)
    _, per_item, _, _ = genu.genu_frame(frame(rows))
    assert dict(zip(per_item["item_id"], per_item["gen_u"], strict=True)) == expected


def test_no_question_reason_counts_each_sample_once():
    # Five samples: two did not parse, three parsed and were dropped as duplicates. The old message
    # subtracted the dropped ones twice and said "unparseable: -1".
    reason = no_question_reason("rephrase", samples=5, unparseable=2, dropped={"empty": 0, "duplicate": 3})
    assert reason == ("no usable rephrase question from 5 samples (unparseable or not a question: 2; "
                      "dropped: duplicate 3)")
