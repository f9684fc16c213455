"""The rule of one right answer (:func:`answer_is_correct`).

What a choice list is and when a researcher's "correct answer" can grade a question are
``studies.choices`` (their one owner, below the studies models, which check a generalization
question's answer with them)."""
from __future__ import annotations


def answer_is_correct(answer: str, gold: str) -> bool:
    """The one rule for "this answer is right", wherever it is decided (grading an attention check
    or a qualification test, the answers list a reviewer filters, the export's ``answer_correct``,
    scoring's majority against gold): the stored label equals the right label exactly. Both sides
    are choice labels checked on the way in (:func:`clean_answer` for workers, the importers for
    gold answers, :func:`correct_answer_problem` for what a researcher sets up), so no case or
    synonym folding is needed, and folding in one place but not another is how the copies disagreed."""
    return answer == gold

