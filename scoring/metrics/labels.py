"""Label-level rules: majority vote, the utility table and Gen-U (SPEC sections 2 and 4).

``majority_index`` (the majority and tie rule) is defined in :mod:`studies.majority`, below the apps,
so that a study stopping units early decides with the same rule that scores; it is re-exported here."""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

from studies.lm import genu

# The majority and tie rule's one owner is ``studies.majority``; its names are re-exported here.
from studies.majority import (  # noqa: F401
    MAJORITY_RULE,
    MAJORITY_RULES,
    MAJORITY_SPEC,
    PLURALITY,
    STRICT_MAJORITY,
    majority_index,
    strict_majority_index,
)

USEFUL, UNSURE, NOT_USEFUL = 1, 0, -1
# The utility vocabulary: value -> name, the reverse, and (name, label) choices for filters and forms.
UTILITY_NAMES = {USEFUL: "useful", UNSURE: "unsure", NOT_USEFUL: "not_useful"}
UTILITY_VALUES = {name: value for value, name in UTILITY_NAMES.items()}
UTILITY_CHOICES = [(name, f"{name.replace('_', ' ')} ({value:+d})" if value else f"{name} (0)")
                   for value, name in UTILITY_NAMES.items()]


def majority_vote(labels: Iterable[Hashable]) -> Hashable | None:
    """The label given by strictly more annotators than any other label, or ``None`` on a tie: the
    plurality reading of SPEC section 2's majority (``MAJORITY_RULE``; ``MAJORITY_RULES`` names the
    other, a strict majority, which scoring reports beside it).

    ``None`` entries (unanswered) are ignored. An empty input has no majority: ``None``.
    SPEC section 2 counts a tie as a wrong answer; callers report how many ties there were."""
    counts = Counter(label for label in labels if label is not None)
    if not counts:
        return None
    names = list(counts)
    index = int(majority_index(np.array([counts[name] for name in names])))
    return None if index < 0 else names[index]


def utility_category(before_correct: bool, after_correct: bool) -> int:
    """The utility table of SPEC section 2: +1 useful (wrong -> right), -1 not useful (wrong after,
    whatever before), 0 unsure (right -> right). A tie (no majority) must be passed as ``False``."""
    if not after_correct:
        return NOT_USEFUL
    return UNSURE if before_correct else USEFUL


def gen_u(before_correct: Sequence[bool], after_correct: Sequence[bool]) -> int:
    """Gen-U of one item (SPEC section 4; the definition is :mod:`studies.lm.genu`).

    ``before_correct[i]`` is whether F^I (question only) answered generalization question i
    correctly, ``after_correct[i]`` whether F^IR (question + the item's rationale) did. Each question
    scores s_i = -1 if F^IR is wrong, else 1 - 1[F^I right]; Gen-U is the mode of the s_i, with ties
    broken toward the *lowest* score (the conservative reading)."""
    if len(before_correct) != len(after_correct):
        raise ValueError(
            f"gen_u: before_correct has {len(before_correct)} answers but after_correct has {len(after_correct)}"
        )
    if len(before_correct) == 0:
        raise ValueError("gen_u: the item has no generalization questions with predictions")
    return genu.mode_score(genu.question_score(bool(b), bool(a)) for b, a in zip(before_correct, after_correct, strict=True))
