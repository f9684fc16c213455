"""Whether a model's predicted answer is right, and keeping the stored flags right when the answer they
were graded against changes.

A rationale's ``prediction_correct`` (graded against its item's ``gold_answer``) and a Gen-U
prediction's ``correct`` (against its generalization question's ``answer``) are stored where they are
written (the rationale importer and generator, the Gen-U job) and read from there by scoring (task
accuracy, U(utility | task accuracy), Gen-U), the API, the exports and the admin. The rule is
:func:`prediction_correct`, here only. An import that changes the answer a stored flag was graded
against (an item's gold answer, a question's answer) calls :func:`rationales_regrade` or
:func:`genu_predictions_regrade` inside its own transaction, so that no reader sees a flag graded
against an answer that is no longer the item's or the question's.

The prompts never show a model the answer of what it is asked (``studies.lm.templates``), so a
corrected answer changes only the grading of the stored predictions, never the predictions
themselves: they are re-graded, not asked again. A row of another researcher's source is re-graded
too: the flag is the item's or question's verdict on the prediction, not part of the source's content,
and a correction that a study using the row would forbid is refused before this runs
(``studies.services.content``: the answer is fixed once such a study opens)."""
from __future__ import annotations

from collections.abc import Iterable

from studies.models import GenUPrediction, Rationale

CHUNK = 5000  # bounded IN lists (SQLite's and PostgreSQL's parameter limits)


def prediction_correct(predicted: str | None, correct: str) -> bool | None:
    """Whether the predicted answer label ``predicted`` is right against the right label ``correct``:
    they are equal exactly (both are choice labels checked on the way in, as
    ``annotations.choices.answer_is_correct`` grades workers' answers). None when there is no
    prediction to grade (none given, or an output that did not parse); a Gen-U prediction, whose
    ``correct`` is not nullable, counts that as wrong (``bool(...)``)."""
    if not predicted:
        return None
    return predicted == correct


def _chunks(ids: Iterable[int]) -> list[list[int]]:
    ids = sorted(set(ids))
    return [ids[start:start + CHUNK] for start in range(0, len(ids), CHUNK)]


def rationales_regrade(*, item_ids: Iterable[int]) -> int:
    """Set ``prediction_correct`` of every rationale of the items ``item_ids`` to what
    :func:`prediction_correct` says against the item's current gold answer; returns how many
    rationales changed. Call inside the transaction that changed the gold answers."""
    changed = []
    for chunk in _chunks(item_ids):
        rows = Rationale.objects.filter(item_id__in=chunk).order_by("pk").values_list(
            "pk", "predicted_answer", "prediction_correct", "item__gold_answer")
        changed += [Rationale(pk=pk, prediction_correct=now) for pk, predicted, stored, gold in rows
                    if (now := prediction_correct(predicted, gold)) != stored]
    Rationale.objects.bulk_update(changed, ["prediction_correct"], batch_size=500)
    return len(changed)


def genu_predictions_regrade(*, question_ids: Iterable[int]) -> int:
    """Set ``correct`` of every Gen-U prediction on the generalization questions ``question_ids`` to
    what :func:`prediction_correct` says against the question's current answer (an unparsed, blank
    prediction stays wrong); returns how many predictions changed. Call inside the transaction that
    changed the answers."""
    changed = []
    for chunk in _chunks(question_ids):
        rows = GenUPrediction.objects.filter(generalization_question_id__in=chunk).order_by("pk").values_list(
            "pk", "predicted_answer", "correct", "generalization_question__answer")
        changed += [GenUPrediction(pk=pk, correct=now) for pk, predicted, stored, answer in rows
                    if (now := bool(prediction_correct(predicted, answer))) != stored]
    GenUPrediction.objects.bulk_update(changed, ["correct"], batch_size=500)
    return len(changed)
