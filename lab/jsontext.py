"""Text and JSON from untrusted sources (API bodies, uploaded files): what no database can store.

Python's JSON parser recurses once per level: a body nested a few thousand deep raises
RecursionError (a 500) and, below that, still reaches code that recurses again on the value.
PostgreSQL refuses a NUL character in any text column and in ``jsonb`` (a 500 when it reaches the
database), and a lone surrogate cannot be encoded at all. Python's parser also reads ``NaN``,
``Infinity`` and ``-Infinity`` (not JSON at all) and turns a number too large for a float
(``1e400``) into infinity: no JSON column holds any of them (SQLite's ``JSON_VALID`` and
PostgreSQL's ``jsonb`` refuse the ``NaN`` / ``Infinity`` Django writes for them, a 500), and a
reader that turns the number into text stores ``"inf"``.

``text_problem`` says what is wrong with one string, ``number_problem`` with one number;
``json_problems`` walks a parsed value (keys too) and yields where each problem is; ``load_json``
parses and refuses the first problem with a ``ValueError`` that says where and what, like any other
bad JSON. Every walk is iterative, so it is safe on any depth."""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 64
NUL = "\x00"


class JsonTooDeep(ValueError):
    pass


class UnstorableText(ValueError):
    pass


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or None."""
    if NUL in value:
        return "contains a NUL character (\\x00), which no text can hold"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate)"
    return None


def number_problem(value: float) -> str | None:
    """Why the number ``value`` cannot be stored in JSON, or None: NaN and the infinities, which
    is also what a number too large for a float (``1e400``) is read as."""
    if math.isnan(value):
        return "is NaN (not a number), which JSON cannot hold"
    if math.isinf(value):
        sign = "-" if value < 0 else ""
        return (f"is {sign}Infinity (or a number too large to store, such as {sign}1e400), "
                "which JSON cannot hold")
    return None


# What no text column can hold (``text_problem``): a NUL, a lone surrogate.
UNSTORABLE_CHARACTERS = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with each character ``text_problem`` refuses (:data:`UNSTORABLE_CHARACTERS`) replaced
    by U+FFFD, the Unicode replacement character: how untrusted text that must be kept anyway (an
    LM's output, an endpoint's error body) is stored."""
    return UNSTORABLE_CHARACTERS.sub("\ufffd", text)


def json_problems(value: Any, *, max_depth: int = MAX_DEPTH) -> Iterator[tuple[tuple, str]]:
    """``(path, reason)`` for every string or key of ``value`` that cannot be stored, every number
    that is not finite (``number_problem``), and for nesting deeper than ``max_depth`` (reported
    once, at the first container too deep). A path is the tuple of list indexes and object keys
    leading to the value."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    too_deep = False
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            reason = text_problem(node)
            if reason:
                yield path, f"the text {reason}"
            continue
        if isinstance(node, float):
            reason = number_problem(node)
            if reason:
                yield path, f"the number {reason}"
            continue
        if isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, list):
            items = list(enumerate(node))
        else:
            continue
        if len(path) >= max_depth:
            if not too_deep:
                too_deep = True
                yield path, f"JSON nested more than {max_depth} levels deep"
            continue
        for key, child in reversed(items):
            if isinstance(key, str):
                reason = text_problem(key)
                if reason:
                    yield path + (key,), f"the key {reason}"
                    continue
            stack.append((child, path + (key,)))


def json_path(path: tuple) -> str:
    """``items[3].question`` style, for messages; the empty path is ``the document``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def load_json(text: str | bytes, *, max_depth: int = MAX_DEPTH, **loads_options: Any) -> Any:
    """``json.loads(text, **loads_options)``, refusing nesting deeper than ``max_depth``
    (JsonTooDeep) and text or a number no database can store (UnstorableText: a NUL, a lone
    surrogate, NaN, an infinity); both are ValueErrors whose message says where."""
    try:
        value = json.loads(text, **loads_options)
    except RecursionError:
        raise JsonTooDeep(f"JSON nested more than {max_depth} levels deep") from None
    for path, reason in json_problems(value, max_depth=max_depth):
        if reason.startswith("JSON nested"):
            raise JsonTooDeep(reason)
        raise UnstorableText(f"at {json_path(path)}: {reason}")
    return value


def json_fingerprint(value: Any, *, digits: int = 12) -> str:
    """The first ``digits`` hex digits of the SHA-256 of ``value``'s canonical JSON (keys sorted,
    no spaces, UTF-8): a short, stable fingerprint that tells two values apart without showing
    them (a recorded prompt's demonstrations, a job's recorded endpoint)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:digits]
