"""What a name, an id, a text or a multiple-choice item's options may hold wherever they are
stored: an import (``studies.services.importers``), a form (``studies.services.content``,
``content_row_save``) or a study bundle (``scoring.services.bundle``). One owner below all of them,
so that none stores what another refuses.

- ``identifier_problem``: an item's external id, a dataset's or a source's name may not hold a
  bidirectional control (``lab.textchars``), which makes it read as another on a page.
- ``sentinel_problem``: a question, an option or a rationale may not hold a T5 sentinel token
  (``<extra_id_0>``), which the T5 prompts and fine-tuning targets are built of.
- ``option_problems``: an option's label is one letter a to z (``studies.choices.choice_label``:
  stored as its lower-case letter), its text is not empty and holds no sentinel, and no label or
  text (without case and extra spaces) is given twice: a worker or a model could not tell them apart.
"""
from __future__ import annotations

import json
import re
import string
from typing import Any

from lab.textchars import bidi_controls_in
from studies.choices import choice_label
from studies.lm.templates import T5_SENTINEL_TEXT

# What an option label may be: one letter, as ``choice_label`` reads one.
LETTERS = string.ascii_lowercase
_SPACES = re.compile(r"\s+")


def short(value: Any, n: int = 60) -> str:
    """``value`` as text, cut to ``n`` characters (with an ellipsis): what a message quotes."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= n else text[: n - 1] + "…"


def identifier_problem(value: str, *, what: str = "the id") -> str | None:
    """Why ``value`` cannot be an identifier (an item's external id, a source's or a dataset's
    name); None when it can. It may not hold a bidirectional control (``lab.textchars``): one makes
    the id read as another on every page and in every export. Free text may hold them (a question
    in a right-to-left language): only identifiers are checked."""
    found = bidi_controls_in(value)
    if found:
        return (f"{what} {short(value.encode('unicode_escape').decode('ascii'))!r} holds the bidirectional control "
                f"character(s) {', '.join(found)}, which make it read as another on a page: remove them")
    return None


def sentinel_problem(text: str, *, what: str) -> str | None:
    """Why ``text`` (``what``: "the question", "the rationale", ...) cannot be stored; None when it
    can: it may not hold a T5 sentinel token (``<extra_id_0>``), which the T5 prompts and
    fine-tuning targets are built of."""
    match = T5_SENTINEL_TEXT.search(text or "")
    if match:
        return (f"{what} holds {match.group(0)!r}, a T5 sentinel token the T5 prompts and fine-tuning targets "
                "are built of: remove it")
    return None


def label_problem(label: str) -> str:
    """Why ``label`` cannot be an option label (``option_problems``)."""
    if not label:
        return "the option has no label"
    return (f"the option label {short(label)!r} is not one letter a to z (written a, A or (a)): the label a "
            "predicted or a worker's answer is read as")


def option_problems(choices: list[dict[str, str]], *, field: str = "choices", text_field: str = "{field}[{n}]",
                    label_field: str = "{field}[{n}].label") -> list[tuple[str, str]]:
    """Each problem of a multiple-choice item's options (``{"label", "text"}``) as (where, reason),
    in order; empty when none. ``where`` is the option's text or label field as its caller names it
    (``text_field``, ``label_field``: formatted with ``field``, the option's index ``n`` and its
    ``label``). A label read as a letter is stored as that letter, in place."""
    problems: list[tuple[str, str]] = []
    labels: dict[str, int] = {}
    texts: dict[str, int] = {}

    def at(pattern: str, n: int) -> str:
        return pattern.format(field=field, n=n, label=choices[n]["label"])

    for n, c in enumerate(choices):
        label = choice_label(c["label"], LETTERS)
        if label is None:
            problems.append((at(label_field, n), label_problem(c["label"])))
        elif label in labels:
            problems.append((at(label_field, n), f"the label {label!r} is also the label of {field}[{labels[label]}]: "
                                                 "each option needs its own label"))
        else:
            labels[label] = n
            c["label"] = label
        key = _SPACES.sub(" ", c["text"]).strip().casefold()
        problem = sentinel_problem(c["text"], what="the option")
        if not c["text"]:
            problems.append((at(text_field, n), f"option {c['label']!r} has no text"))
        elif problem:
            problems.append((at(text_field, n), problem))
        elif key in texts:
            problems.append((at(text_field, n), f"the option {short(c['text'])!r} is also {at(text_field, texts[key])}: "
                                                "a worker or a model could not tell the two apart"))
        else:
            texts[key] = n
    return problems
