"""The majority rule and its tie rule (SPEC section 2), and when further answers can no longer
change it: pure numpy, no Django.

It lives below the apps that use it (``studies`` <- ``annotations`` <- ``scoring``) so that there is
one copy: scoring reads it through :mod:`scoring.metrics.labels` (``majority_index``,
``majority_vote``, the study planner), and a study that stops a unit once its result is decided
(``Study.stop_when_decided``; ``annotations.services.stopping``) asks :func:`outcome_decided`,
which applies the same :func:`majority_index` to every way the remaining answers can fall.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from math import comb

import numpy as np

# The majority rule, named (SPEC section 2: "Aggregate each of the two answers over the annotators by
# majority vote"; "Majority ties (even annotator counts, or multiple choice) have no majority answer").
# SPEC leaves open whether a plurality short of more than half of the annotators is a majority: with
# two choices the readings coincide, with three or more (a 2-1-1-1 split of 5 on a four-option item)
# they do not. ``majority_index`` is the default reading, the one every published figure and early
# stopping (``outcome_decided``) use; scoring gives the other beside it (``majority_readings``).
PLURALITY = "plurality"
STRICT_MAJORITY = "strict_majority"
MAJORITY_RULE = PLURALITY
MAJORITY_RULES = {
    PLURALITY: "plurality: the label more annotators gave than any other; our reading of SPEC section 2",
    STRICT_MAJORITY: "strict majority: more than half of the annotators; otherwise no majority answer, counted as "
                     "wrong like a tie",
}
MAJORITY_SPEC = ("SPEC section 2 aggregates by \"majority vote\" and counts a tie as no majority answer; it leaves "
                 "open whether a plurality short of more than half of the annotators is a majority")


# Enumerating the remaining answers is cheap for the paper's designs (5 workers, 2-4 choices: at
# most 56 ways). Past this many ways a unit is not stopped early (it fills its quota as usual)
# rather than spend a submit's time on the enumeration: conservative, never wrong.
MAX_WAYS = 50_000


def majority_index(counts, axis: int = -1) -> np.ndarray:
    """The majority rule on vote counts, vectorised: ``counts[..., j]`` is how many annotators gave
    label ``j`` (``axis`` names the labels' axis); the result is the index of the label given by
    strictly more annotators than any other, or ``-1`` on a tie (or no votes): the plurality
    reading (``MAJORITY_RULE``; :func:`strict_majority_index` is the other). The one owner of the
    tie rule: scoring's ``majority_vote`` applies it to labels, the study planner to simulated
    votes, and :func:`outcome_decided` to the answers a unit may still get."""
    counts = np.asarray(counts)
    top = counts.max(axis=axis, keepdims=True)
    n_top = (counts == top).sum(axis=axis)
    top = np.squeeze(top, axis=axis)
    return np.where((n_top == 1) & (top > 0), counts.argmax(axis=axis), -1)


def strict_majority_index(counts, axis: int = -1) -> np.ndarray:
    """The other reading of the majority rule (``STRICT_MAJORITY``), vectorised like
    :func:`majority_index`: the index of the label given by more than half of the annotators, or
    ``-1`` when no label is (a tie, a plurality short of half, or no votes). Never used by a
    published figure or by early stopping; scoring reports what it gives beside the default."""
    counts = np.asarray(counts)
    index = majority_index(counts, axis=axis)
    top = counts.max(axis=axis)
    return np.where(2 * top > counts.sum(axis=axis), index, -1)


def _n_ways(remaining: int, choices: int) -> int:
    return comb(remaining + choices - 1, choices - 1)


@lru_cache(maxsize=128)
def remaining_ways(remaining: int, choices: int) -> np.ndarray:
    """Every way ``remaining`` further answers fall on ``choices`` labels: an array of shape
    (ways, choices) of vote counts (each row sums to ``remaining``)."""
    def compositions(total: int, parts: int):
        if parts == 1:
            yield (total,)
            return
        for first in range(total + 1):
            for rest in compositions(total - first, parts - 1):
                yield (first, *rest)

    ways = np.array(list(compositions(remaining, choices)), dtype=np.int64)
    ways.setflags(write=False)
    return ways


def majority_right_decided(counts: Sequence[int], *, correct: int, remaining: int) -> bool | None:
    """Whether the majority of ``counts`` (votes per choice; ``correct`` is the index of the right
    choice) is right, if that no longer depends on the ``remaining`` answers still to come: True
    (right whatever they are), False (wrong, a tie included, whatever they are), or None (some
    remaining answers would change it, or there are too many ways to enumerate: ``MAX_WAYS``)."""
    counts = np.asarray(counts, dtype=np.int64)
    if remaining <= 0:
        return bool(majority_index(counts) == correct)
    if _n_ways(remaining, counts.size) > MAX_WAYS:
        return None
    right = majority_index(counts[np.newaxis, :] + remaining_ways(remaining, counts.size)) == correct
    if right.all():
        return True
    if not right.any():
        return False
    return None


def outcome_decided(step_counts: Sequence[Sequence[int]], *, correct: int, remaining: int) -> bool:
    """Whether a unit's score is decided under the default majority rule (``MAJORITY_RULE``, the
    one the published figures use): for every step the score uses (``step_counts``: one vector
    of votes per choice each), the correctness of its majority is the same for every set of the
    ``remaining`` answers. Then the utility category (a function of the steps' correctness alone,
    SPEC section 2) is decided too. A unit whose right answer is not one of its choices
    (``correct`` < 0) is never decided early."""
    if correct < 0:
        return False
    return all(majority_right_decided(counts, correct=correct, remaining=remaining) is not None
               for counts in step_counts)
