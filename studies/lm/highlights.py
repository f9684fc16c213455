"""Highlights (extractive rationales): character spans over an item's question, and the two
inputs faithfulness needs besides the full one (SPEC section 6): the highlight alone and the
input without it. Pure Python."""
from __future__ import annotations

from collections.abc import Iterable

# Where y_hat, the class whose probability faithfulness compares, is predicted from:
# "highlight": the highlight pass (select-then-predict; the seed pyhighlights scores the model that
# made the highlight this way); "full": the full input (ERASER; for a task model that reads the
# full input and did not make the highlight).
Y_HAT_FROM = ("highlight", "full")


def check_spans(spans, text: str) -> list[tuple[int, int]]:
    """``spans`` as sorted, merged ``(start, end)`` character offsets (end exclusive) inside
    ``text``; a ValueError says what is wrong."""
    if not isinstance(spans, (list, tuple)):
        raise ValueError("highlights must be a list of [start, end] character offsets")
    out: list[tuple[int, int]] = []
    for span in spans:
        if (not isinstance(span, (list, tuple)) or len(span) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)):
            raise ValueError(f"highlight span {span!r} is not [start, end] with whole numbers")
        start, end = span
        if not 0 <= start < end <= len(text):
            raise ValueError(f"highlight span [{start}, {end}] is outside the question's {len(text)} characters "
                             "or empty")
        out.append((start, end))
    return merge_spans(out)


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(start, end)`` spans sorted, those that overlap or touch merged into one (the one reading
    of "the same highlight": ``check_spans``, and ``studies.faithfulness_rules`` comparing the spans
    probabilities were computed on with the rationale's)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def token_spans_to_chars(token_spans, text: str) -> list[list[int]]:
    """Spans of whitespace tokens ``[first, last + 1)`` as character spans over ``text``."""
    positions, start = [], None
    for index, char in enumerate(text + " "):
        if char.isspace():
            if start is not None:
                positions.append((start, index))
                start = None
        elif start is None:
            start = index
    out = []
    for span in token_spans:
        if (not isinstance(span, (list, tuple)) or len(span) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)):
            raise ValueError(f"token span {span!r} is not [first, last + 1] with whole numbers")
        first, stop = span
        if not 0 <= first < stop <= len(positions):
            raise ValueError(f"token span [{first}, {stop}] is outside the question's {len(positions)} tokens or empty")
        out.append([positions[first][0], positions[stop - 1][1]])
    return out


def _join(parts: Iterable[str]) -> str:
    return " ".join(" ".join(parts).split())


def highlight_only(text: str, spans) -> str:
    """h: the highlighted parts in order, joined by spaces."""
    return _join(text[start:end] for start, end in check_spans(spans, text))


def without_highlight(text: str, spans) -> str:
    """x \\ h: the question with the highlighted parts removed."""
    parts, cursor = [], 0
    for start, end in check_spans(spans, text):
        parts.append(text[cursor:start])
        cursor = end
    parts.append(text[cursor:])
    return _join(parts)
