"""Values in import rows: text, yes/no and option labels, question-text matching keys, splits."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from studies.models import Dataset, Split

from .errors import ImportValidationError


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def short(value: Any, n: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= n else text[: n - 1] + "…"


_TRUE = {"true", "yes", "y", "1", "t"}
_FALSE = {"false", "no", "n", "0", "f"}


def yes_no_label(value: Any, *, strict_true_false: bool = False) -> str | None:
    """``"yes"`` / ``"no"`` for a boolean-like value, else None.

    ``strict_true_false`` accepts only booleans and the words True / False (any case), as the
    generalization files use."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return None
    text = str(value).strip().lower()
    if strict_true_false:
        return {"true": "yes", "false": "no"}.get(text)
    if text in _TRUE:
        return "yes"
    if text in _FALSE:
        return "no"
    return None


_PAREN_LABEL = re.compile(r"^\(?\s*([A-Za-z])\s*\)?\.?$")


def choice_label(value: Any, labels: Iterable[str]) -> str | None:
    """The lower-case option label for ``"b"``, ``"B"``, ``"(b)"``, ``"b)"``; None if not one of
    ``labels``."""
    if not isinstance(value, str):
        return None
    m = _PAREN_LABEL.match(value.strip())
    if not m:
        return None
    label = m.group(1).lower()
    return label if label in set(labels) else None


def answer_label(dataset: Dataset, value: Any) -> str | None:
    if dataset.is_yes_no:
        return yes_no_label(value)
    return choice_label(value, dataset.allowed_labels())


def describe_allowed(dataset: Dataset) -> str:
    if dataset.is_yes_no:
        return "yes/no (or True/False)"
    return ", ".join(dataset.allowed_labels())


_BACKSLASH_QUOTE = re.compile(r"\\+(['\"])")
_TRAILING_NOISE = re.compile(r"\?[\s,'\"]+$")
_SPACES = re.compile(r"\s+")


def normalize_question(text: str) -> str:
    """The key under which question texts are matched across files.

    Real files disagree on small things: trailing spaces (``"...significance? "``), escaped
    quotes (``Alice\\'s``), a stray ``" ,"`` or ``'`` after the question mark, double spaces.
    None of those change the question, so they are ignored; letters and words are not."""
    text = _BACKSLASH_QUOTE.sub(r"\1", text or "")
    text = _SPACES.sub(" ", text).strip()
    text = _TRAILING_NOISE.sub("?", text)
    return text.casefold()


def split_from_name(name: str) -> str | None:
    """Guess the split from a file name: ``strategyqa_processed_test.json`` is test."""
    stem = Path(name).stem.lower()
    tokens = re.split(r"[^a-z]+", stem)
    for token in reversed(tokens):
        if token in {"train", "training"}:
            return Split.TRAIN.value
        if token in {"dev", "val", "valid", "validation"}:
            return Split.DEV.value
        if token == "test":
            return Split.TEST.value
    return None


def check_split(value: str | None, *, filename: str) -> str | None:
    if value in (None, ""):
        return None
    value = str(value).strip().lower()
    if value not in Split.values:
        raise ImportValidationError(
            f"unknown split {value!r}: use one of {', '.join(Split.values)}", filename=filename
        )
    return value
