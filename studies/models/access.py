"""API access: tokens for scripts, and the permission to see raw platform worker ids.

An ``ApiToken`` is shown once, when it is created (admin or ``api_token_create``); the database
keeps only its SHA-256 digest, so a leaked database dump does not leak working tokens. A token
sends ``Authorization: Token rl_...`` and acts as its user, limited to safe (read) methods when
``read_only`` is set. A token only ever narrows once made (``ApiToken.clean``): revoked stays
revoked, read-only stays read-only, an expiry only moves earlier; a wider token is a new token.
A token also ends when its user's password changes (set, reset, or made unusable), as their
sessions do: ``studies.signals`` marks the user's tokens ``ended_by_password_change`` when the
account is saved with a new password. Django's rehash of the same password on login (a hasher's
new iteration count) is not a change and leaves them working.

The custom permission ``studies.view_raw_worker_ids`` lives on this model's ``Meta``: staff users
who hold it may ask the API and the exports for raw platform ids (MTurk WorkerId, Prolific PID);
everybody else only ever sees keyed pseudonyms.

A ``StudyShare`` lets another researcher reach a study at one level: ``view`` (read it, its
answers, scores and exports), ``change`` (also change its design, attention checks and content,
open and close it) or ``pay`` (also publish it and move money: approve, reject, bonus,
block). Each level includes the ones before it, and the model
permissions (``studies.change_study``, ``studies.pay_workers``) still apply on top
(``studies.selectors.studies_for_user``).
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


class StudyShare(models.Model):
    """One researcher's access to another's study (the through row of ``Study.shared_with``; it
    keeps that relation's table, so shares made before levels existed are these rows)."""

    class Level(models.TextChoices):
        VIEW = "view", "view: read the study, its answers, scores and exports"
        CHANGE = "change", "change: also change its design and content; open and close it"
        PAY = "pay", "pay: also publish it and move money (approve, reject, bonus, block)"

    study = models.ForeignKey("studies.Study", on_delete=models.CASCADE, related_name="shares")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.VIEW)

    class Meta:
        db_table = "studies_study_shared_with"
        unique_together = [("study", "user")]
        verbose_name = "share"

    def __str__(self) -> str:
        return f"{self.study} shared with {self.user} ({self.level})"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'analysis notebook'.")
    # The first characters of the key, to recognise a token in lists; never enough to use it.
    prefix = models.CharField(max_length=16, editable=False)
    key_digest = models.CharField(max_length=64, unique=True, editable=False)
    read_only = models.BooleanField(
        default=True, help_text="Read-only tokens may only GET; writes answer 403."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    revoked = models.BooleanField(default=False)
    # Set, once and for good, when the user's password changed after the token was made
    # (``api_tokens_end_for_password_change``): the token ends, as the user's sessions do.
    ended_by_password_change = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        permissions = [
            ("view_raw_worker_ids", "Can see raw platform worker ids in the API and exports"),
        ]

    def clean(self) -> None:
        """A stored token may be narrowed, never widened: revocation is one-way, a read-only token
        stays read-only, an expiry moves only earlier (and a token that expires never becomes one
        that does not), and it keeps its user. Whoever needs more creates a new token, whose key
        is shown once. Compared with the stored row, so every path that validates (the admin's
        form, ``api_token_update``) gets the same answer."""
        super().clean()
        if self.pk is None:
            return
        stored = ApiToken.objects.filter(pk=self.pk).values("user_id", "read_only", "expires_at", "revoked").first()
        if stored is None:
            return
        errors = {}
        if stored["revoked"] and not self.revoked:
            errors["revoked"] = "A revoked token stays revoked: create a new token instead."
        if stored["read_only"] and not self.read_only:
            errors["read_only"] = ("A read-only token stays read-only: create a read-write token instead "
                                   "(its key is shown once).")
        if stored["expires_at"] is not None and (self.expires_at is None or self.expires_at > stored["expires_at"]):
            errors["expires_at"] = "A token's expiry can only move earlier: create a new token instead."
        if stored["user_id"] != self.user_id:
            errors["user"] = "A token keeps the user it was made for."
        if errors:
            raise ValidationError(errors)

    def __str__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"{self.name} ({self.prefix}…, {mode})"
