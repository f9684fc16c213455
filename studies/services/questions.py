"""Writes of generalization questions outside imports and generation."""
from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from studies.models import GeneralizationQuestion
from studies.services.content import content_change_check, generalization_questions_validation_move

# Who may set a question's validation status (a person; the operator, None, always may).
CHANGE_PERMISSION = "studies.change_generalizationquestion"


class QuestionError(Exception):
    pass


def validation_change_problem(user) -> str:
    """Why ``user`` may not change an existing question's validation status ("" when they may):
    the one rule for whoever sets it, ``generalization_questions_set_validation`` and a re-import of
    a generalization file that changes a stored question's status
    (``importers.generalization``), which refuses the whole file with this reason by row. A
    question's status is a change of the question: it needs ``CHANGE_PERMISSION``. The operator
    (None) always may; a new question's first status is the import's, not a change."""
    if user is None or user.has_perm(CHANGE_PERMISSION):
        return ""
    return (f"you may not change generalization questions (their validation status included): "
            f"that needs the permission {CHANGE_PERMISSION}")


def generalization_questions_set_validation(
    *, questions: Iterable[GeneralizationQuestion], status: str, user=None
) -> list[GeneralizationQuestion]:
    """Set the validation status of the given questions for ``user`` (None: the operator); returns
    the questions that changed (as saved; a question already in ``status`` is left as it is).
    Raises ``QuestionError`` when ``user`` lacks ``studies.change_generalizationquestion`` (a
    status is a change of the question, whoever asks: the admin's actions, a script, the API), and
    ``ContentNotYours`` (``studies.services.content``) when one of them is used by a study ``user``
    may not change, or hangs from an item they may not build on (one read only through a view
    share): the CHANGE share is checked here, under a lock on those studies, for every caller. A
    validation status is the researchers' judgement of a question, not what workers see: it stays
    editable after a study using it opens.

    The one writer of ``validation_status`` after a question is made (an import sets it with the
    file's provenance; an edit of what a validation judged sends a question back to unvalidated,
    ``content.generalization_questions_validation_reset``, by the same move,
    ``content.generalization_questions_validation_move``): each change records who made it, when,
    and the status it replaced in ``metadata["validation"]`` (``content.validation_provenance``),
    with the judgements it replaced in its ``history``, so a question marked invalid and valid again
    still shows both changes.

    The change is announced, in the same transaction, by ``studies.signals.generalization_validation_changed``
    (the annotations app closes the units of a question marked invalid in an open study, and opens
    them again when it is marked valid or unvalidated)."""
    if status not in GeneralizationQuestion.Validation.values:
        raise QuestionError(
            f"unknown validation status {status!r}: use {', '.join(GeneralizationQuestion.Validation.values)}"
        )
    problem = validation_change_problem(user)
    if problem:
        raise QuestionError(problem)
    ids = [q.pk for q in questions]
    with transaction.atomic():
        content_change_check(user=user, model=GeneralizationQuestion, changes={pk: {"validation_status"} for pk in ids},
                             lock=True)
        return generalization_questions_validation_move(ids, status=status, user=user, at=timezone.now())


def validation_ever_invalid(*, status: str, metadata) -> bool:
    """Whether a question with ``status`` and ``metadata`` is or was marked invalid, as its
    validation record (``content.validation_provenance``: the status it replaced and its history) says."""
    invalid = GeneralizationQuestion.Validation.INVALID
    record = (metadata or {}).get("validation") if isinstance(metadata, dict) else None
    if status == invalid:
        return True
    if not isinstance(record, dict):
        return False
    entries = [record, *[e for e in record.get("history") or [] if isinstance(e, dict)]]
    return any(invalid in (e.get("status"), e.get("previous")) for e in entries)
