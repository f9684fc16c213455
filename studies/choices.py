"""The rules of a question's choices: what a choice list is, which choices a generalization
question offers, and when a gold or "correct" answer can grade a question.

Pure functions, below the models (``studies.models`` checks a generalization question's answer
with them, ``annotations.models`` an attention check's) and the services (``annotations.services``
validate workers' answers against them); ``annotations.choices`` adds the rule of one right answer.
A dataset's answer labels are read here too: what an import file may write for one (``answer_label``)
and what a rationale's stored predicted answer must be (``predicted_answer_problem``).
Nothing here imports a model: a question and its item are read by their attributes."""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# A yes/no question's choices: what yes/no items hold, and what an empty choice list means.
YES_NO_CHOICES = [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}]


def as_label(value: Any) -> str:
    """``value`` read as a choice label: its text without surrounding white space. The one rule of
    what a label is, read wherever one is taken in (:func:`normalise_choices` for the labels a page
    offers, ``annotations.services.steps`` and the qualification grading for a worker's answer,
    :func:`correct_answer_problem` for a right answer set up, the bundle import for a right answer
    it brings); compared afterwards, labels are equal exactly (``annotations.choices.answer_is_correct``).
    A copy that trimmed on one side only offered workers an option ("Paris ") that no answer could
    match."""
    return str(value).strip()


def normalise_choices(choices) -> list[dict]:
    """Choices as ``[{"label", "text"}]``; accepts plain strings too; empty means yes/no. Every
    label, a string choice's as an object's, is read by :func:`as_label`; a string choice's text
    is the string as written. Raises ``ValueError``, saying what it got, when ``choices`` is not a
    list (a number, a string, an object) or holds something that is neither a string nor a
    ``{"label", "text"}`` object: what a page or an answer check can catch, where iterating it
    would fail as a ``TypeError``."""
    if choices is not None and not isinstance(choices, list | tuple):
        raise ValueError(f"choices must be a list of choices, got {type(choices).__name__} {str(choices)[:40]!r}")
    out = []
    for choice in choices or []:
        if isinstance(choice, dict):
            label = as_label(choice.get("label", ""))
            out.append({"label": label, "text": str(choice.get("text", label))})
        elif isinstance(choice, str | int | float):
            out.append({"label": as_label(choice), "text": str(choice)})
        else:
            raise ValueError(f"a choice must be a string or a {{label, text}} object, got {type(choice).__name__}")
    return out or [dict(c) for c in YES_NO_CHOICES]


# A choice's label is what an answer stores (``Annotation.answer``, an item's ``gold_answer``, a
# question's right answer: 50 characters) and what the answer form takes
# (``annotations.forms.AnswerForm``), so a longer one would be offered and could never be chosen.
LABEL_MAX = 50


def label_length_problem(labels) -> str | None:
    """Why one of ``labels`` (as :func:`normalise_choices` offers them, in order) is too long to be
    answered (``LABEL_MAX``); None when none is."""
    for number, label in enumerate(labels, start=1):
        if len(label) > LABEL_MAX:
            return (f"the label of choice {number} is {len(label)} characters, at most {LABEL_MAX} (an answer stores "
                    'its label): give it a short label and its text apart, e.g. {"label": "a", "text": "..."}')
    return None


# The attribute a bundle import sets on a question it copies (``labels_as_recorded``): its labels are
# kept as the original installation recorded them, even longer than ``LABEL_MAX`` (a bundle made
# before the rule; its workers answered the shorter ones), so that the copy reproduces the original.
LABELS_AS_RECORDED = "labels_as_recorded"


def label_length_checked(question) -> bool:
    """Whether ``question``'s choice labels are held to ``LABEL_MAX`` (not a bundle's copy)."""
    return not getattr(question, LABELS_AS_RECORDED, False)


def choices_problem(choices, *, length_checked: bool = True) -> str | None:
    """Why ``choices`` cannot be a question's own list of choices (a generalization question's
    ``metadata["choices"]``); None when it can: a list of at least two choices, each a non-empty
    string (its label and text) or a ``{"label", "text"}`` object with a non-empty label, no label
    given twice, none longer than ``LABEL_MAX``. The labels judged are those :func:`normalise_choices` offers workers, so a list
    that passes offers only labels a worker's answer can match."""
    if not isinstance(choices, list):
        return f'must be a list of at least two choices, e.g. ["a", "b"], not {str(choices)[:40]!r}'
    if len(choices) < 2:
        return f"must be a list of at least two choices, not {len(choices)}"
    for number, choice in enumerate(choices, start=1):
        label = choice.get("label") if isinstance(choice, dict) else choice
        if not isinstance(label, str):
            return f'choice {number} must be a non-empty string (or an object with one as its "label")'
        if isinstance(choice, dict) and not isinstance(choice.get("text", ""), str):
            return f'the "text" of choice {number} must be a string'
    labels = [c["label"] for c in normalise_choices(choices)]
    for number, label in enumerate(labels, start=1):
        if not label:
            return f'choice {number} must be a non-empty string (or an object with one as its "label")'
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        return f"the choice {repeated[0]!r} is given twice"
    return label_length_problem(labels) if length_checked else None


def own_choices(metadata):
    """A generalization question's own choices (``metadata["choices"]``) as stored, unchecked;
    None when its metadata names none (its item's choices are offered)."""
    return metadata.get("choices") if isinstance(metadata, dict) else None


def genq_choices(genq, item) -> list[dict]:
    """Choices offered for a generalization question: its own (:func:`own_choices`), else
    the original item's (yes/no items hold the yes/no choices). ``item`` is read only when the
    question has no choices of its own. ``ValueError`` as :func:`normalise_choices`."""
    return normalise_choices(own_choices(genq.metadata) or item.choices)


def correct_answer_problem(choices, correct_answer: str) -> str | None:
    """Why ``correct_answer`` cannot grade a question with ``choices``; None when it can: it must be
    one of the labels :func:`normalise_choices` offers, exactly (the rule
    ``annotations.choices.answer_is_correct`` grades by, and what scoring compares column-wise). One
    written with surrounding white space ("Yes " for the label "Yes") is refused, naming the label
    to write, so a stored right answer is always a label as offered. Choices that are no list of
    choices (:func:`normalise_choices`) are the problem named."""
    try:
        labels = [c["label"] for c in normalise_choices(choices)]
    except ValueError as exc:
        return f"the choices are not usable: {exc}"
    if correct_answer in labels:
        return None
    if isinstance(correct_answer, str) and as_label(correct_answer) in labels:
        return (f"'{str(correct_answer)[:50]}' is not one of the choices ({', '.join(labels)}): write "
                f"'{as_label(correct_answer)}', without the white space around it.")
    return (f"'{str(correct_answer)[:50]}' is not one of the choices ({', '.join(labels)}). Workers answer with "
            "a choice, and an answer is right only when it is exactly that choice.")


def question_choices_problems(choices, correct_answer: str, *, length_checked: bool = True) -> dict[str, str]:
    """What is wrong with a graded question's ``choices`` and right answer (an attention check's, a
    qualification test question's), by field: the right answer must be one of the choices
    (:func:`correct_answer_problem`), and each choice one an answer can hold
    (:func:`label_length_problem`). Empty when nothing is."""
    problem = correct_answer_problem(choices, correct_answer)
    if problem:
        return {"correct_answer": problem}
    problem = label_length_problem([c["label"] for c in normalise_choices(choices)]) if length_checked else None
    return {"choices": problem} if problem else {}


# A dataset's answer labels (``Dataset.allowed_labels``): what an import file may write for one, and
# what a stored predicted answer must be.
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


def answer_label(dataset, value: Any) -> str | None:
    """The dataset's label ``value`` names, as an import file may write it (``"Yes"``, ``"True"``,
    ``"(B)"``); None when it names none of ``dataset.allowed_labels()``."""
    if dataset.is_yes_no:
        return yes_no_label(value)
    return choice_label(value, dataset.allowed_labels())


def describe_allowed(dataset) -> str:
    if dataset.is_yes_no:
        return "yes/no (or True/False)"
    return ", ".join(dataset.allowed_labels())


def predicted_answer_problem(dataset, predicted: str | None) -> str | None:
    """Why ``predicted`` cannot be the stored predicted answer of a rationale of an item of
    ``dataset``; None when it can: blank (no prediction) or one of ``dataset.allowed_labels()``
    exactly, what ``studies.services.grading.prediction_correct`` grades by. A label written as an
    import file may write it (``"Yes"``, ``"(B)"``, read by :func:`answer_label`) is named as the
    label to write."""
    labels = dataset.allowed_labels()
    if not predicted or predicted in labels:
        return None
    label = answer_label(dataset, predicted)
    hint = f" (write {label!r})" if label else ""
    return (f"{str(predicted)[:50]!r} is not one of the choice labels of dataset {dataset.name!r} "
            f"({', '.join(labels)}){hint}; leave it blank for no prediction")
