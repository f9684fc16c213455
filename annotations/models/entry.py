"""How workers came in: which worker a platform's assignment id belongs to, and the consent
forms already received (so that a retried form never makes a second participant or task)."""
from __future__ import annotations

from django.db import models

from studies.models import Platform, Study

from .core import Assignment, Participant


class PlatformAssignmentBinding(models.Model):
    """A platform's own assignment id (MTurk ``assignmentId``, Prolific ``SESSION_ID``) belongs to
    the first worker id seen with it. The platform gives each id to one worker, so a later entry
    pairing the id with another worker id is someone else's URL edited: the unique constraint
    refuses it, whatever the timing."""

    platform = models.CharField(max_length=20, choices=Platform.choices)
    platform_assignment_id = models.CharField(max_length=64)
    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="platform_bindings")
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["platform", "platform_assignment_id"],
                                    name="platform_assignment_id_one_worker"),
        ]

    def __str__(self) -> str:
        return f"{self.platform} {self.platform_assignment_id} -> {self.participant}"


class ConsentReceipt(models.Model):
    """One consent form as sent from one landing page: ``key`` is the page's one-time nonce. A
    retry of the same form (its response was lost, so the browser has no cookie yet) finds this
    row and gets the same participant and the same task, never a new one. ``consent_sha256`` is
    the SHA-256 of the consent text the page showed, the one the worker agreed to (the study's, which
    is fixed once it opens); empty on receipts taken before it was recorded."""

    key = models.CharField(max_length=64, unique=True)
    # db_default: receipts written by an older schema's code (a rolling deploy) get "" too.
    consent_sha256 = models.CharField(
        max_length=64, blank=True, default="", db_default="",
        help_text="SHA-256 (hex) of the consent text (UTF-8) the worker agreed to; empty on older receipts.",
    )
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+")
    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="consent_receipts")
    assignment = models.ForeignKey(Assignment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"consent of {self.participant} to {self.study}"
