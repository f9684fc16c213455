"""Values in import rows: text, yes/no and option labels, question-text matching keys, splits, and
what an identifier or a text may not hold."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from studies.choices import answer_label, choice_label, describe_allowed, yes_no_label  # noqa: F401 (their importers' name)
from studies.models import Split
from studies.textrules import identifier_problem, sentinel_problem, short  # noqa: F401 (their importers' names)

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
