"""Exact early stopping (issue 24) against the score itself: on simulated crowds, a unit stopped
as soon as ``studies.majority.outcome_decided`` says so gets the same majority correctness, before
and after, and the same utility category as the full five answers of the same crowd would give,
as scoring computes them (``scoring.metrics.majority_vote``, ``utility_category``; a tie is wrong).

Property-based (hypothesis): each example is a crowd (worker accuracy 0.5-0.9 before and after,
yes/no or four-choice questions, a seed) answering a batch of units; a few hundred examples cover
thousands of units. A second property draws the answers themselves, with no crowd model at all."""
from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.metrics import majority_vote, utility_category
from studies.majority import majority_index, majority_right_decided, outcome_decided

FULL = 5
UNITS_PER_CROWD = 40


def right(answers: list[int], gold: int) -> bool:
    """The score's reading: the majority label equals gold; a tie (no majority) is wrong."""
    return majority_vote(answers) == gold


def stop_point(before: list[int], after: list[int], *, gold: int, choices: int) -> int:
    """How many of the crowd's answers (in arrival order) a study that stops early collects."""
    for k in range(FULL + 1):
        counts = [np.bincount(step[:k], minlength=choices) for step in (before, after)]
        if outcome_decided(counts, correct=gold, remaining=FULL - k):
            return k
    raise AssertionError("five answers always decide a unit")


def check_unit(before: list[int], after: list[int], *, gold: int, choices: int) -> int:
    k = stop_point(before, after, gold=gold, choices=choices)
    full = (right(before, gold), right(after, gold))
    stopped = (right(before[:k], gold), right(after[:k], gold))
    assert stopped == full, (before, after, gold, k)
    assert utility_category(*stopped) == utility_category(*full)
    return k


def crowd_answers(rng: random.Random, accuracy: float, choices: int, gold: int) -> list[int]:
    wrong = [c for c in range(choices) if c != gold]
    return [gold if rng.random() < accuracy else rng.choice(wrong) for _ in range(FULL)]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(q_before=st.floats(0.5, 0.9), q_after=st.floats(0.5, 0.9), choices=st.sampled_from([2, 4]),
       seed=st.integers(0, 2**32 - 1))
def test_on_simulated_crowds_stopping_early_changes_no_units_score(q_before, q_after, choices, seed):
    rng = random.Random(seed)
    collected = 0
    for _ in range(UNITS_PER_CROWD):
        gold = rng.randrange(choices)
        before = crowd_answers(rng, q_before, choices, gold)
        after = crowd_answers(rng, q_after, choices, gold)
        collected += check_unit(before, after, gold=gold, choices=choices)
    assert collected <= UNITS_PER_CROWD * FULL


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(choices=st.sampled_from([2, 3, 4]), data=st.data())
def test_any_answers_stopped_early_score_as_the_full_five(choices, data):
    answers = st.lists(st.integers(0, choices - 1), min_size=FULL, max_size=FULL)
    before, after = data.draw(answers), data.draw(answers)
    check_unit(before, after, gold=data.draw(st.integers(0, choices - 1)), choices=choices)


def test_the_paper_example_three_agreeing_of_five_decide_a_yes_no_unit():
    assert outcome_decided([[3, 0], [0, 3]], correct=0, remaining=2)
    assert not outcome_decided([[2, 0], [0, 3]], correct=0, remaining=3)


def test_decided_is_exactly_the_closed_form_worst_case():
    """An independent reading of "decided" for one step: right whatever comes when the right label
    leads every other by more than the remaining answers; wrong whatever comes when, even with all
    of them, it cannot lead strictly (a tie counts as wrong)."""
    rng = random.Random(7)
    for _ in range(5000):
        choices = rng.choice([2, 3, 4])
        remaining = rng.randrange(0, 6)
        counts = [rng.randrange(0, 4) for _ in range(choices)]
        gold = rng.randrange(choices)
        other = max(c for i, c in enumerate(counts) if i != gold)
        expected = True if counts[gold] > other + remaining else False if counts[gold] + remaining <= other else None
        if remaining == 0:
            expected = bool(majority_index(np.array(counts)) == gold)
        assert majority_right_decided(counts, correct=gold, remaining=remaining) is expected, (counts, gold, remaining)


def test_a_unit_whose_right_answer_is_not_a_choice_is_never_stopped_early():
    assert not outcome_decided([[0, 0], [0, 0]], correct=-1, remaining=5)


def test_too_many_ways_to_enumerate_is_not_decided():
    assert majority_right_decided([0] * 6, correct=0, remaining=40) is None
