"""Writes of generalization questions outside imports and generation."""
from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from studies.models import GeneralizationQuestion


class QuestionError(Exception):
    pass


def generalization_questions_set_validation(
    *, questions: Iterable[GeneralizationQuestion], status: str
) -> int:
    """Set the validation status of the given questions; returns how many changed."""
    if status not in GeneralizationQuestion.Validation.values:
        raise QuestionError(
            f"unknown validation status {status!r}: use {', '.join(GeneralizationQuestion.Validation.values)}"
        )
    ids = [q.pk for q in questions]
    with transaction.atomic():
        return (
            GeneralizationQuestion.objects.filter(pk__in=ids)
            .exclude(validation_status=status)
            .update(validation_status=status, updated_at=timezone.now())
        )
