"""Filtering generated generalization questions: drop empties, exact duplicates and near
duplicates (of the original question, of each other, and of the item's questions of another
type: a text cannot be both a rephrase and a counterfactual of one question, so the type
generated first keeps it)."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

NEAR_DUPLICATE_RATIO = 0.9


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def is_near_duplicate(a: str, b: str, *, ratio: float = NEAR_DUPLICATE_RATIO) -> bool:
    na, nb = normalise(a), normalise(b)
    if na == nb:
        return True
    return difflib.SequenceMatcher(None, na, nb, autojunk=False).ratio() >= ratio


@dataclass
class Candidate:
    text: str
    answer: str
    raw: str
    index: int


def filter_questions(candidates: list[Candidate], *, original: str, existing: list[str] = (),
                     other_types: list[str] = (),
                     ratio: float = NEAR_DUPLICATE_RATIO) -> tuple[list[Candidate], dict[str, int]]:
    """Keep candidates in order; return them with counts of what was dropped and why. ``existing``
    are the item's questions of this type, ``other_types`` its questions of the other types."""
    kept: list[Candidate] = []
    dropped = {"empty": 0, "duplicate_of_original": 0, "duplicate": 0, "duplicate_of_other_type": 0}
    seen = list(existing)
    for candidate in candidates:
        if not normalise(candidate.text):
            dropped["empty"] += 1
            continue
        if is_near_duplicate(candidate.text, original, ratio=ratio):
            dropped["duplicate_of_original"] += 1
            continue
        if any(is_near_duplicate(candidate.text, other, ratio=ratio) for other in seen):
            dropped["duplicate"] += 1
            continue
        if any(is_near_duplicate(candidate.text, other, ratio=ratio) for other in other_types):
            dropped["duplicate_of_other_type"] += 1
            continue
        kept.append(candidate)
        seen.append(candidate.text)
    return kept, dropped
