"""LM-side records: generation jobs, question generators, parse failures and the Gen-U
answerers' predictions. The LM worker (studies.lm, studies.tasks) writes them."""
from __future__ import annotations

from django.db import models

from .core import GeneralizationQuestion, RationaleSource


class GenUPrediction(models.Model):
    """One answer of a Gen-U answerer to a generalization question.

    ``answerer`` is ``I`` (F^I: question only) or ``IR`` (F^IR: question plus the original
    item's rationale from ``rationale_source``). For ``I`` predictions the rationale source is
    the one whose Gen-U is being computed too, so each (question, source) pair has one of each."""

    class Answerer(models.TextChoices):
        I = "I", "F^I (question only)"  # noqa: E741
        IR = "IR", "F^IR (question and rationale)"

    generalization_question = models.ForeignKey(
        GeneralizationQuestion, on_delete=models.CASCADE, related_name="genu_predictions"
    )
    rationale_source = models.ForeignKey(RationaleSource, on_delete=models.CASCADE, related_name="genu_predictions")
    answerer = models.CharField(max_length=2, choices=Answerer.choices)
    answerer_model = models.CharField(max_length=500, help_text="Model name or path of the answerer.")
    predicted_answer = models.CharField(max_length=50, blank=True)
    correct = models.BooleanField()
    raw_output = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["generalization_question", "rationale_source", "answerer"],
                name="genu_prediction_unique",
            )
        ]
