"""JSON from untrusted text (API bodies, uploaded files) with a bound on nesting.

Python's parser recurses once per level: a body nested a few thousand deep raises RecursionError
(a 500) and, below that, still reaches code that recurses again on the value. ``load_json`` refuses
anything nested deeper than ``max_depth`` with a ``ValueError`` that says so, like any other bad
JSON."""
from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class JsonTooDeep(ValueError):
    pass


def json_depth_check(value: Any, *, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` unchanged, or JsonTooDeep when its lists and objects nest deeper than ``max_depth``.
    Iterative, so it is safe on any depth."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            raise JsonTooDeep(f"JSON nested more than {max_depth} levels deep")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return value


def load_json(text: str | bytes, *, max_depth: int = MAX_DEPTH, **loads_options: Any) -> Any:
    """``json.loads(text, **loads_options)``, refusing nesting deeper than ``max_depth``
    (JsonTooDeep, a ValueError)."""
    try:
        value = json.loads(text, **loads_options)
    except RecursionError:
        raise JsonTooDeep(f"JSON nested more than {max_depth} levels deep") from None
    return json_depth_check(value, max_depth=max_depth)
