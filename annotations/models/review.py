"""A researcher's decisions on what workers and platforms reported: a flagged question or
explanation accepted (its flag earns the flag bonus) or dismissed; a worker blocked."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from studies.models import Study

from .core import Annotation, Participant


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


class WorkerBlock(models.Model):
    """A researcher's block of a worker (``annotations.services.platforms.close.worker_block``).
    It covers the study it was made on and every study owned by the researcher who made it
    (``annotations.selectors.participant_blocked``), never another researcher's. ``everywhere``:
    a superuser's block of the worker in every study (it also sets ``Participant.blocked`` and
    blocks the worker on the MTurk account)."""

    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="blocks")
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="worker_blocks")
    researcher = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    everywhere = models.BooleanField(default=False)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["participant", "researcher"])]

    def __str__(self) -> str:
        return f"{self.participant} blocked ({'everywhere' if self.everywhere else f'from study {self.study_id}'})"
