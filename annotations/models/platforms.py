"""Crowd platforms: what was published where, every call that touched a platform (the audit
table), bonuses, participant links and MTurk qualification types.

Money safety rests on ``PlatformCall``: a row with a deterministic ``idempotency_key`` is
committed in status ``sent`` *before* the request leaves, and marked ``confirmed`` after the
platform answered. A retry of the same key never sends again once confirmed, and reconciles
with the platform first when the earlier attempt's outcome is unknown (see
``annotations.services.payments``).
"""
from __future__ import annotations

import secrets
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from lab.transitions import StatusMachine
from studies.models import Platform, Study

from .core import Assignment, Participant


def new_link_token() -> str:
    # 32 random bytes: unguessable, URL-safe, 43 characters.
    return secrets.token_urlsafe(32)


def new_completion_code() -> str:
    return secrets.token_hex(4).upper()


def new_installation_id() -> str:
    return secrets.token_hex(4)


class Installation(models.Model):
    """This installation's id: one row, made once. The platform idempotency tokens (MTurk's
    UniqueRequestToken, bonus tokens, qualification type names) carry it, so two deployments on
    one requester account never share a token, and rotating ``SECRET_KEY`` changes no token:
    the same bonus asked for again is still the same bonus, paid once."""

    installation_id = models.CharField(max_length=16, unique=True, default=new_installation_id)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"installation {self.installation_id}"


class Publication(models.Model):
    """One batch of a study put on one platform. ``request_token`` is derived from the study and
    the batch, so a retried publish finds the same row (and MTurk's UniqueRequestToken is built
    from it, so a retried create_hit never makes a second HIT)."""

    class Status(models.TextChoices):
        PUBLISHING = "publishing", "Publishing (calls in flight)"
        PUBLISHED = "published", "Published"
        CLOSED = "closed", "Closed"
        FAILED = "failed", "Failed"
        DRY_RUN = "dry_run", "Dry run (nothing sent)"

    # A dry run is created as such and never moves. A batch that failed before anything was
    # sent is reused (publishing again).
    STATUS = StatusMachine("status", {
        Status.PUBLISHING: {Status.PUBLISHED, Status.FAILED, Status.CLOSED},
        Status.FAILED: {Status.PUBLISHING},
        Status.PUBLISHED: {Status.CLOSED},
    })

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="publications")
    platform = models.CharField(max_length=20, choices=Platform.choices)
    batch = models.PositiveIntegerField(default=1)
    request_token = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PUBLISHING)
    dry_run = models.BooleanField(default=False)
    # MTurk: [{"index": 0, "hit_id": "...", "max_assignments": 9}, ...]; Prolific: [{"study_id": "..."}].
    external_ids = models.JSONField(default=list, blank=True)
    endpoint = models.CharField(max_length=300, blank=True, help_text="API endpoint used (sandbox or live).")
    # Prolific: the code a worker's browser hands back at the end (the questionnaire redirects to
    # https://app.prolific.com/submissions/complete?cc=<code>).
    completion_code = models.CharField(max_length=16, default=new_completion_code)
    n_tasks = models.PositiveIntegerField(default=0, help_text="Assignments / places / links requested.")
    reward = models.DecimalField(max_digits=8, decimal_places=2, default=Decimal("0"))
    currency = models.CharField(max_length=3, default="USD")
    estimated_cost = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0"))
    # What was (or, for a dry run, would be) sent: no secrets.
    plan = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    # Who published (committed the money) is kept: PROTECT refuses deleting the account (deactivate
    # it instead). None: published by a command (the operator).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "platform", "batch", "dry_run"], name="publication_one_per_batch"
            ),
            models.UniqueConstraint(
                fields=["request_token"], condition=Q(dry_run=False), name="publication_unique_request_token"
            ),
        ]

    def __str__(self) -> str:
        suffix = " (dry run)" if self.dry_run else ""
        return f"{self.study} on {self.platform}, batch {self.batch}{suffix}"

    @property
    def hit_ids(self) -> list[str]:
        return [entry["hit_id"] for entry in self.external_ids if entry.get("hit_id")]

    @property
    def prolific_study_id(self) -> str:
        for entry in self.external_ids:
            if entry.get("study_id"):
                return entry["study_id"]
        return ""


class PlatformCall(models.Model):
    """The audit table: one row per state-changing platform call (every call that costs money,
    and the reviews, blocks and closes that go with them). Never holds a credential."""

    class Status(models.TextChoices):
        SENT = "sent", "Sent (outcome not yet recorded)"
        CONFIRMED = "confirmed", "Confirmed"
        FAILED = "failed", "Failed (not applied; safe to retry)"

    # Recorded (as failed) before it is sent, sent, then confirmed or failed; a failed call may
    # be sent again under the same idempotency key.
    STATUS = StatusMachine("status", {
        Status.FAILED: {Status.SENT},
        Status.SENT: {Status.CONFIRMED, Status.FAILED},
    })

    class Operation(models.TextChoices):
        CREATE_HIT = "create_hit", "MTurk: create HIT"
        ADD_ASSIGNMENTS = "add_assignments", "MTurk: add assignments to a HIT"
        CREATE_QUALIFICATION = "create_qualification", "MTurk: create qualification type"
        ASSOCIATE_QUALIFICATION = "associate_qualification", "MTurk: grant qualification"
        EXPIRE_HIT = "expire_hit", "MTurk: expire HIT"
        NOTIFY = "notify", "Notify workers"
        CREATE_STUDY = "create_study", "Prolific: create draft study"
        PUBLISH_STUDY = "publish_study", "Prolific: publish study"
        STOP_STUDY = "stop_study", "Prolific: stop study"
        APPROVE = "approve", "Approve assignment / submission"
        REJECT = "reject", "Reject assignment / submission"
        BONUS = "bonus", "Pay bonus"
        BONUS_SETUP = "bonus_setup", "Prolific: set up bonus"
        BLOCK = "block", "Block worker"

    platform = models.CharField(max_length=20, choices=Platform.choices)
    operation = models.CharField(max_length=40, choices=Operation.choices)
    idempotency_key = models.CharField(max_length=200, unique=True)
    # The platform's own idempotency token, when it has one (MTurk UniqueRequestToken, max 64).
    platform_token = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.SENT)
    # Who made the call is kept (README: who and when are kept on the call): PROTECT refuses deleting
    # the account (deactivate it instead). None: no account (a task, the shell: ``actor``).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    study = models.ForeignKey(Study, null=True, blank=True, on_delete=models.SET_NULL, related_name="platform_calls")
    publication = models.ForeignKey(
        Publication, null=True, blank=True, on_delete=models.SET_NULL, related_name="calls"
    )
    assignment = models.ForeignKey(
        Assignment, null=True, blank=True, on_delete=models.SET_NULL, related_name="platform_calls"
    )
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0"))
    currency = models.CharField(max_length=3, default="USD")
    request_summary = models.JSONField(default=dict, blank=True)
    response = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["study", "status"])]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="platform_call_amount_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.platform} {self.operation} [{self.status}] {self.idempotency_key}"


class Bonus(models.Model):
    """A bonus promised to a worker for one assignment. ``token`` is derived from the assignment,
    amount and reason, so the same bonus requested twice is one row and is paid once."""

    class Kind(models.TextChoices):
        FLAGGED_ERROR = "flagged_error", "Flagged a broken question"
        GOOD_WORK = "good_work", "Consistently good work"
        OTHER = "other", "Other"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        PAID = "paid", "Paid"
        FAILED = "failed", "Failed (not paid; safe to pay again)"
        UNKNOWN = "unknown", "Outcome unknown (sent, answer lost; the next sync asks the platform)"
        RECORDED = "recorded", "Recorded (paid outside the app)"

    # A bonus whose answer was lost is unknown, never failed: sync asks the platform and moves it
    # to paid, or back to pending when the platform has no record of it.
    STATUS = StatusMachine("status", {
        Status.PENDING: {Status.PAID, Status.FAILED, Status.UNKNOWN, Status.RECORDED},
        Status.UNKNOWN: {Status.PAID, Status.PENDING, Status.FAILED},
        Status.FAILED: {Status.PENDING, Status.PAID, Status.UNKNOWN, Status.RECORDED},
    })

    assignment = models.ForeignKey(Assignment, on_delete=models.PROTECT, related_name="bonuses")
    participant = models.ForeignKey(Participant, on_delete=models.PROTECT, related_name="bonuses")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.OTHER)
    amount = models.DecimalField(max_digits=8, decimal_places=2)
    currency = models.CharField(max_length=3, default="USD")
    reason = models.TextField()
    token = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    platform_call = models.ForeignKey(
        PlatformCall, null=True, blank=True, on_delete=models.SET_NULL, related_name="bonuses"
    )
    error = models.TextField(blank=True, help_text="Why the last attempt failed, or what is unknown about it.")
    # Who granted the bonus is kept: PROTECT refuses deleting the account (deactivate it instead).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    paid_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "bonuses"
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="bonus_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.currency} to {self.participant} ({self.kind})"


class ParticipantLink(models.Model):
    """A single-person link: the first visit creates its participant (or recognises the browser's
    participant of this study), later visits (a reload, another day) return the same participant.
    Its tasks are the ones started through it (``Assignment.participant_link``). Revoked links
    stop working."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="participant_links")
    publication = models.ForeignKey(
        Publication, null=True, blank=True, on_delete=models.SET_NULL, related_name="participant_links"
    )
    token = models.CharField(max_length=64, unique=True, default=new_link_token)
    label = models.CharField(max_length=200, blank=True, help_text="E.g. a lab seat or session name.")
    completion_code = models.CharField(max_length=16, default=new_completion_code)
    # Set at the link's first use: a new participant, or the one this browser proved it worked as
    # in this study (``participant_link_redeem``), so one person may hold several of a study's links.
    participant = models.ForeignKey(
        Participant, null=True, blank=True, on_delete=models.SET_NULL, related_name="participant_links"
    )
    revoked = models.BooleanField(default=False)
    # Who handed out the link (admitted its participant) is kept: PROTECT refuses deleting the
    # account (deactivate it instead). None: made by a command (the operator).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    redeemed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["study_id", "id"]

    def __str__(self) -> str:
        return f"link {self.pk} for {self.study}"


class OpenLink(models.Model):
    """One link for many people (a class, a forum post); every new visitor becomes a new
    participant, and all of them get the same completion code at the end."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="open_links")
    publication = models.ForeignKey(
        Publication, null=True, blank=True, on_delete=models.SET_NULL, related_name="open_links"
    )
    token = models.CharField(max_length=64, unique=True, default=new_link_token)
    completion_code = models.CharField(max_length=64, default=new_completion_code)
    max_participants = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: no limit.")
    n_participants = models.PositiveIntegerField(default=0)
    active = models.BooleanField(default=True)
    # Who handed out the link (admitted its participants) is kept: PROTECT refuses deleting the
    # account (deactivate it instead). None: made by a command (the operator).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["study_id", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_participants__isnull=True) | Q(n_participants__lte=models.F("max_participants")),
                name="open_link_not_over_capacity",
            ),
        ]

    def __str__(self) -> str:
        return f"open link {self.pk} for {self.study}"


class MTurkQualificationType(models.Model):
    """The MTurk qualification type made for a study: a graded test (QuestionForm + AnswerKey,
    scored by MTurk as a percentage) or one the app grants after its own qualification flow."""

    class Kind(models.TextChoices):
        GRADED_TEST = "graded_test", "Graded test on MTurk"
        APP_GRANTED = "app_granted", "Granted by the app"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="mturk_qualification_types")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    endpoint = models.CharField(max_length=300)
    qualification_type_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    # Workers need a value >= this (a percentage for graded tests, 0-100 for app grants).
    min_score = models.PositiveIntegerField(default=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MTurk qualification type"
        constraints = [
            models.UniqueConstraint(fields=["study", "kind", "endpoint"], name="mturk_qualtype_one_per_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.qualification_type_id})"


class PlatformSubmission(models.Model):
    """What the platform says about one worker's assignment / submission, refreshed by sync, and
    matched to the answers the questionnaire stored."""

    class Flag(models.TextChoices):
        OK = "", "—"
        NO_LOCAL_ASSIGNMENT = "no_local_assignment", "Submitted on the platform, unknown here"
        NO_ANSWERS = "no_answers", "Submitted on the platform with no stored answers"
        WORKER_MISMATCH = "worker_mismatch", "The platform's worker is not the participant who answered here"
        NOT_ON_PLATFORM = "not_on_platform", "Answered here, unknown to the platform"
        NOT_SUBMITTED_HERE = "not_submitted_here", (
            "Submitted on the platform, but the task here is active, returned or expired (never submitted): "
            "held; reject it on the worker's page, or clear it and approve that task on its own")
        ENDED_ON_PLATFORM = "ended_on_platform", (
            "Submitted here, but the platform lists the session as timed out or returned, so the platform does "
            "not pay the worker for it: held; read the answers, then clear the hold to count them and pay the "
            "worker with a bonus, or leave it held to keep them out")

    publication = models.ForeignKey(Publication, on_delete=models.CASCADE, related_name="submissions")
    platform_assignment_id = models.CharField(max_length=200)
    platform_task_id = models.CharField(max_length=200, blank=True)
    worker_id = models.CharField(max_length=200, blank=True)
    platform_status = models.CharField(max_length=40)
    assignment = models.ForeignKey(
        Assignment, null=True, blank=True, on_delete=models.SET_NULL, related_name="platform_submissions"
    )
    flag = models.CharField(max_length=30, choices=Flag.choices, blank=True, default="")
    # When sync set the current ``flag`` (or changed it, to OK included); left alone while the flag
    # stays. With ``cleared_at`` it dates every change of a hold, which the scores' staleness reads
    # (``scoring.selectors.unit_counting_changes``). Null: never flagged, or flagged before it was kept.
    flagged_at = models.DateTimeField(null=True, blank=True)
    # A worker-id mismatch, or work the platform's listing does not know (``NOT_ON_PLATFORM``),
    # keeps the work out of scores, approval and bonuses until a researcher clears it
    # (``annotations.services.platforms.review.submission_clear``). Work the platform lists as
    # submitted whose task here is not (``NOT_SUBMITTED_HERE``) is never approved in a batch: the
    # researcher rejects it, or clears it and approves that one task (its decision is dated here).
    # Work submitted here whose platform session timed out or was returned (``ENDED_ON_PLATFORM``)
    # stops counting until a researcher clears it (to count it and pay the worker by bonus). Who
    # cleared it (a decision that pays) is kept: PROTECT refuses deleting the account (deactivate it
    # instead). None with ``cleared_at``: cleared with no account (a task, the shell), or by an account
    # deleted while a rejection whose answer was lost held its clear (``review._hold_clear_set``).
    cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    cleared_at = models.DateTimeField(null=True, blank=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    synced_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["publication_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["publication", "platform_assignment_id"], name="platform_submission_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.platform_assignment_id} [{self.platform_status}]"
