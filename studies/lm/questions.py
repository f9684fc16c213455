"""Filtering generated generalization questions.

A generalization question is, by design, often a minimal edit of the original: a counterfactual
changes one word ("lunch" -> "dinner"), a rephrase reorders a few. So the filter drops only what
is no new question at all, and nothing for being merely similar:

- ``empty``: nothing left once punctuation and spaces are set aside;
- ``duplicate_of_original``: the original question again once case, spaces and punctuation are
  set aside (:func:`normalise`);
- ``repeat``: a question this item already has, or was just given, for the same type, again once
  case, spaces and punctuation are set aside (one sample of several repeating another).

The same text under another type is kept (the released test questions, taken as the validated set
in our reading of SPEC section 4, hold 67 such questions): a validation study, not a string rule, decides whether it fits both types.

Every dropped sample comes back with its reason and the text it repeats, so the job can store it
(:class:`studies.models.DroppedQuestion`). Outputs that are not a question are refused earlier,
by the parser (:func:`studies.lm.parsing.question_problem`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

DROP_REASONS = {
    "empty": "empty once punctuation and spaces are set aside",
    "duplicate_of_original": "the original question again (case, spaces and punctuation set aside)",
    "repeat": "a question of this type the item already has (case, spaces and punctuation set aside)",
}


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


@dataclass
class Candidate:
    text: str
    answer: str
    raw: str
    index: int


@dataclass(frozen=True)
class Dropped:
    candidate: Candidate
    reason: str  # a key of DROP_REASONS
    matched: str = ""  # the text it repeats


def filter_questions(candidates: list[Candidate], *, original: str,
                     existing: list[str] = ()) -> tuple[list[Candidate], list[Dropped]]:
    """Keep candidates in order; return them and every dropped one with its reason (:data:`DROP_REASONS`).
    ``existing`` are the item's questions of this type."""
    kept: list[Candidate] = []
    dropped: list[Dropped] = []
    key_original = normalise(original)
    seen = {normalise(text): text for text in reversed(list(existing))}
    for candidate in candidates:
        key = normalise(candidate.text)
        if not key:
            dropped.append(Dropped(candidate, "empty"))
        elif key == key_original:
            dropped.append(Dropped(candidate, "duplicate_of_original", original))
        elif key in seen:
            dropped.append(Dropped(candidate, "repeat", seen[key]))
        else:
            kept.append(candidate)
            seen[key] = candidate.text
    return kept, dropped
