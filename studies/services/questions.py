"""Writes of generalization questions outside imports and generation."""
from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from studies.models import GeneralizationQuestion
from studies.services.content import content_change_check


class QuestionError(Exception):
    pass


def generalization_questions_set_validation(
    *, questions: Iterable[GeneralizationQuestion], status: str, user=None
) -> int:
    """Set the validation status of the given questions for ``user`` (None: the operator); returns
    how many changed. Raises ``ContentNotYours`` (``studies.services.content``) when one of them is
    used by a study ``user`` may not change. A validation status is the researchers' judgement of
    a question, not what workers see: it stays editable after a study using it opens."""
    if status not in GeneralizationQuestion.Validation.values:
        raise QuestionError(
            f"unknown validation status {status!r}: use {', '.join(GeneralizationQuestion.Validation.values)}"
        )
    ids = [q.pk for q in questions]
    with transaction.atomic():
        content_change_check(user=user, model=GeneralizationQuestion, changes={pk: {"validation_status"} for pk in ids},
                             lock=True)
        return GeneralizationQuestion.STATUS.move_queryset(GeneralizationQuestion.objects.filter(pk__in=ids), status)
