"""The rules of a question's choices and of one right answer: what a choice list is, when an answer
is right, and when a researcher's "correct answer" can grade a question.

Pure functions below the models (``annotations.models`` validates attention checks with them) and
the services (``annotations.services.steps`` validates workers' answers with them)."""
from __future__ import annotations

from studies.models import YES_NO_CHOICES


def normalise_choices(choices) -> list[dict]:
    """Choices as ``[{"label", "text"}]``; accepts plain strings too; empty means yes/no."""
    out = []
    for choice in choices or []:
        if isinstance(choice, dict):
            label = str(choice.get("label", "")).strip()
            out.append({"label": label, "text": str(choice.get("text", label))})
        else:
            out.append({"label": str(choice), "text": str(choice)})
    return out or [dict(c) for c in YES_NO_CHOICES]


def answer_is_correct(answer: str, gold: str) -> bool:
    """The one rule for "this answer is right", wherever it is decided (grading an attention check
    or a qualification test, the answers list a reviewer filters, the export's ``answer_correct``,
    scoring's majority against gold): the stored label equals the right label exactly. Both sides
    are choice labels checked on the way in (:func:`clean_answer` for workers, the importers for
    gold answers, :func:`correct_answer_problem` for what a researcher sets up), so no case or
    synonym folding is needed, and folding in one place but not another is how the copies disagreed."""
    return answer == gold


def correct_answer_problem(choices, correct_answer: str) -> str | None:
    """Why ``correct_answer`` cannot grade a question with ``choices``; None when it can: it must be
    one of the choice labels, exactly (see :func:`answer_is_correct`)."""
    labels = [c["label"] for c in normalise_choices(choices)]
    if correct_answer in labels:
        return None
    return (f"'{str(correct_answer)[:50]}' is not one of the choices ({', '.join(labels)}). Workers answer with "
            "a choice, and an answer is right only when it is exactly that choice.")
