"""A researcher's decisions on what workers and platforms reported: a flagged question or
explanation accepted (its flag earns the flag bonus) or dismissed."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from .core import Annotation


class FlagReview(models.Model):
    """The researcher's decision on one flag (an answer whose payload carries ``"flag": true``:
    the worker reported the question or the explanation as broken). Only an accepted flag makes
    its assignment a candidate for the flagged-error bonus, and ``bonus_pay`` refuses that kind
    without one."""

    class Decision(models.TextChoices):
        ACCEPTED = "accepted", "Accepted (a real problem; eligible for the flag bonus)"
        DISMISSED = "dismissed", "Dismissed"

    annotation = models.OneToOneField(Annotation, on_delete=models.CASCADE, related_name="flag_review")
    decision = models.CharField(max_length=10, choices=Decision.choices)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"flag on answer {self.annotation_id}: {self.decision}"


class FlaggedAnswer(Annotation):
    """The answers that carry a worker's flag, as the admin lists them for review."""

    class Meta:
        proxy = True
        verbose_name = "flagged question or explanation"
        verbose_name_plural = "flagged questions and explanations"
