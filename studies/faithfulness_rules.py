"""What a rationale's faithfulness probabilities (``Rationale.faithfulness``, SPEC section 6) may be
wherever they are stored: the faithfulness job (``studies.services.generation.faithfulness``), the
rationales importer (``studies.services.importers.rationales``), the admin's form
(``studies.admin.core.RationaleAdmin``) or a study bundle (``scoring.services.bundle``); and what
scoring (``scoring.services.score``) reads of them. One owner below all of them, so that none
stores what another refuses and scoring leaves out what none would store.

- ``probability_problem`` / ``probability_read``: ``p_full``, ``p_highlight`` and ``p_without`` are
  numbers in [0, 1] (true and false are not numbers here, nor NaN or infinities).
- ``faithfulness_problems``: a stored value is empty or holds all three probabilities, a
  ``y_hat_from`` of ``Y_HAT_FROM`` where it names one, the highlight spans it was computed on
  (``SPANS_KEY``) where it records them, text (or null) for what computed them where it names it
  (``TEXT_KEYS``: scoring counts and sorts them), text, a JSON object or list for ``prompt``, and
  a list of text (or text, or null) for the task model's ``checkpoint`` (``CHECKPOINT_KEY``).
- ``spans_state``: whether the probabilities still belong to the rationale's highlight. The job and
  the importer record the spans the probabilities were computed on (``SPANS_KEY``); an edit of the
  highlights (a re-import without probabilities, the admin, the API) leaves them as they were, so a
  rationale whose highlights now differ is left out by scoring (``DIFFER``). Values stored before the
  spans were recorded carry none (``NOT_RECORDED``): scoring keeps them and says how many.
- ``Y_HAT_FROM_ASSUMED``: an import whose file names no ``y_hat_from`` is taken to follow the import
  format's rule (y_hat from the highlight), and marked so (``ASSUMED_KEY``): scoring lists such sources
  apart from those known to follow SPEC.
"""
from __future__ import annotations

import math
from typing import Any

from studies.lm.highlights import Y_HAT_FROM, merge_spans
from studies.textrules import short

PROBABILITIES = ("p_full", "p_highlight", "p_without")
# The highlight spans ([[start, end], ...] over the question) the probabilities were computed on.
SPANS_KEY = "highlights"
# True where the y_hat rule was not given but assumed (an import without a y_hat_from column).
ASSUMED_KEY = "y_hat_from_assumed"
Y_HAT_FROM_ASSUMED = "highlight"
ASSUMPTION = ("probabilities imported without a y_hat_from column are taken to have y_hat predicted from the "
              "highlight (the import format's rule, SPEC section 6's); nothing in the file says so")

MATCH, DIFFER, NOT_RECORDED = "match", "differ", "not_recorded"
# What computed the probabilities, as the job stores it (or the importer, ``imported_from``), and the
# answer they are probabilities of: text where given (null reads as not given). Scoring groups and
# sorts them (``scoring.services.score``), so a list or object there would fail its run.
TEXT_KEYS = ("task_model", "task_backend", "imported_from", "method", "y_hat")
# The template the job read: its text, or a structured one (counted by scoring by its JSON text).
PROMPT_KEY = "prompt"
# Which weights of the task model computed them, as the job stores it: the sorted fingerprints of
# the training records of the trained checkpoints in its folder (``inputs.recorded_model_checkpoint``),
# None for a model no job here trained; missing from values stored before it was recorded. Scoring
# groups by it (``computed_with``, by its JSON text), so two checkpoints under one path read apart.
CHECKPOINT_KEY = "checkpoint"


def _shown(value: Any) -> str:
    """``value`` as a message quotes it: text in quotes, a JSON value as JSON (``true``, ``1.5``)."""
    return repr(short(value)) if isinstance(value, str) else short(value)


def probability_problem(value: Any, *, key: str) -> str | None:
    """Why ``value`` cannot be the stored probability ``key``; None when it can."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key} {_shown(value)} is not a number: give a probability between 0 and 1"
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return f"{key} {_shown(value)} is not a probability between 0 and 1"
    return None


def probability_read(raw: Any, *, key: str) -> tuple[float | None, str | None]:
    """A file's cell (CSV text or a JSON value) as the probability ``key``: (value, None), or
    (None, why not)."""
    value = raw
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            return None, f"{key} {_shown(raw)} is not a probability between 0 and 1"
    problem = probability_problem(value, key=key)
    return (None, problem) if problem else (float(value), None)


def y_hat_from_problem(value: Any) -> str | None:
    if value not in Y_HAT_FROM or not isinstance(value, str):
        return f"y_hat_from {_shown(value)} is not one of {', '.join(Y_HAT_FROM)}"
    return None


def _spans(value: Any) -> list[tuple[int, int]] | None:
    """``value`` as sorted, merged (start, end) spans, or None when it is not a list of them."""
    if not isinstance(value, list | tuple):
        return None
    out = []
    for span in value:
        if (not isinstance(span, list | tuple) or len(span) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)
                or not 0 <= span[0] < span[1]):
            return None
        out.append((span[0], span[1]))
    return merge_spans(out)


def faithfulness_problems(value: Any) -> dict[str, str]:
    """Why ``value`` cannot be a rationale's ``faithfulness``, key -> reason; empty when it can
    (``{}``, none computed, can)."""
    if value is None or value == {}:
        return {}
    if not isinstance(value, dict):
        return {"faithfulness": "faithfulness must be a JSON object holding p_full, p_highlight and p_without"}
    problems: dict[str, str] = {}
    for key in PROBABILITIES:
        if key not in value:
            problems[key] = f"{key} is missing: faithfulness needs {', '.join(PROBABILITIES)}"
        elif problem := probability_problem(value[key], key=key):
            problems[key] = problem
    if "y_hat_from" in value and (problem := y_hat_from_problem(value["y_hat_from"])):
        problems["y_hat_from"] = problem
    if ASSUMED_KEY in value and not isinstance(value[ASSUMED_KEY], bool):
        problems[ASSUMED_KEY] = f"{ASSUMED_KEY} must be true or false"
    for key in TEXT_KEYS:
        if value.get(key) is not None and not isinstance(value[key], str):
            problems[key] = f"{key} {_shown(value[key])} must be text"
    if value.get(PROMPT_KEY) is not None and not isinstance(value[PROMPT_KEY], str | dict | list):
        problems[PROMPT_KEY] = f"{PROMPT_KEY} {_shown(value[PROMPT_KEY])} must be text, a JSON object or a list"
    checkpoint = value.get(CHECKPOINT_KEY)
    if checkpoint is not None and not isinstance(checkpoint, str) and not (
            isinstance(checkpoint, list) and all(isinstance(v, str) for v in checkpoint)):
        problems[CHECKPOINT_KEY] = (f"{CHECKPOINT_KEY} {_shown(checkpoint)} must be a list of fingerprints (text), "
                                    "text or null")
    if SPANS_KEY in value and _spans(value[SPANS_KEY]) is None:
        problems[SPANS_KEY] = (f"{SPANS_KEY} (the spans the probabilities were computed on) must be a list of "
                               "[start, end] character offsets")
    return problems


def faithfulness_problem_text(value: Any) -> str | None:
    """``faithfulness_problems`` in one sentence; None when there is none."""
    problems = faithfulness_problems(value)
    return "; ".join(problems.values()) if problems else None


def spans_problem(highlights: Any) -> str | None:
    """Why ``highlights`` cannot be recorded as the spans probabilities were computed on; None when
    they can (none: ``[]``)."""
    if _spans(highlights or []) is None:
        return (f"{SPANS_KEY} must be a list of [start, end] character offsets to be recorded with the "
                "faithfulness probabilities")
    return None


def with_spans(value: dict, highlights: Any) -> dict:
    """``value`` recording ``highlights`` as the spans its probabilities were computed on."""
    return {**value, SPANS_KEY: [list(span) for span in highlights or []]}


def spans_state(value: dict, highlights: Any) -> str:
    """``MATCH`` when the spans ``value`` was computed on are the rationale's ``highlights`` now
    (the same text highlighted: spans sorted and merged), ``DIFFER`` when not, ``NOT_RECORDED`` for
    a value stored before the spans were recorded."""
    if SPANS_KEY not in value:
        return NOT_RECORDED
    recorded = _spans(value[SPANS_KEY])
    return MATCH if recorded is not None and recorded == _spans(highlights or []) else DIFFER


def y_hat_from_assumed(value: dict) -> bool:
    """Whether ``value``'s y_hat rule was assumed rather than given: marked so by the importer, or
    a value with no rule that no faithfulness job wrote (a job always ran with a known rule)."""
    return value.get(ASSUMED_KEY) is True or ("y_hat_from" not in value and not value.get("job_id"))
