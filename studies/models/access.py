"""API access: tokens for scripts, and the permission to see raw platform worker ids.

An ``ApiToken`` is shown once, when it is created (admin or ``api_token_create``); the database
keeps only its SHA-256 digest, so a leaked database dump does not leak working tokens. A token
sends ``Authorization: Token rl_...`` and acts as its user, limited to safe (read) methods when
``read_only`` is set.

The custom permission ``studies.view_raw_worker_ids`` lives on this model's ``Meta``: staff users
who hold it may ask the API and the exports for raw platform ids (MTurk WorkerId, Prolific PID);
everybody else only ever sees keyed pseudonyms.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models


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

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        permissions = [
            ("view_raw_worker_ids", "Can see raw platform worker ids in the API and exports"),
        ]

    def __str__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        return f"{self.name} ({self.prefix}…, {mode})"
