"""Who answered what: participants, units of work, assignments (one worker's task) and the
answers of each step.

Invariants held by the database, not only by the services:
- a unit never appears twice in one assignment;
- a worker sees a question at most once per study (``Claim`` is unique on
  study, participant and ``question_key``, whatever the source);
- each step of a claimed unit is answered once (``Annotation`` unique on claim and step).
"""
from __future__ import annotations

import random
import secrets

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.db.models.lookups import LessThan
from django.utils import timezone

from lab.pseudonyms import worker_pseudonym
from lab.transitions import StatusMachine
from studies.choices import label_length_checked, question_choices_problems
from studies.models import GeneralizationQuestion, Item, Platform, Rationale, RationaleSource, Study


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Participant(models.Model):
    """A worker on one platform. ``external_id`` is the raw platform id (MTurk WorkerId,
    Prolific PID, or a generated id for links): exports pseudonymise it."""

    platform = models.CharField(max_length=20, choices=Platform.choices)
    external_id = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    blocked = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["platform", "external_id"], name="participant_unique_per_platform"),
        ]

    def __str__(self) -> str:
        # The pseudonym, never the raw id: the admin and logs show this to users who may not see
        # raw worker ids (studies.view_raw_worker_ids).
        return f"{self.platform}:{worker_pseudonym(self.platform, self.external_id)}"


# Units' random keys lie in [0, RAND_KEY_SPAN): a PostgreSQL ``integer``.
RAND_KEY_SPAN = 2**31


def unit_rand_key() -> int:
    """A unit's random key, drawn once when the unit is built (the claim's order among equally
    filled units: ``annotations.services.assignment``)."""
    return random.getrandbits(31)


class Unit(models.Model):
    """One thing that needs ``quota`` distinct workers: an item x source (utility), a
    generalization question x source (generalization), a generated question (validation), or
    a rationale (properties). ``question_key`` names the question a worker sees, so that no
    worker sees it twice in a study with another source."""

    # No index of its own: ``unit_claim_order`` starts with the study (see there).
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="units", db_index=False)
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="units")
    source = models.ForeignKey(RationaleSource, null=True, blank=True, on_delete=models.CASCADE)
    rationale = models.ForeignKey(Rationale, null=True, blank=True, on_delete=models.CASCADE)
    generalization_question = models.ForeignKey(
        GeneralizationQuestion, null=True, blank=True, on_delete=models.CASCADE
    )
    question_key = models.CharField(max_length=100)
    quota = models.PositiveIntegerField()
    # The unit's claims not released (held by active work or by work that counts), and of those
    # the ones that count (``annotations.selectors.claims_that_count``). Kept by the services of
    # ``annotations.services`` (see ``release`` for the rules); a unit takes workers while
    # ``n_claimed < quota`` and is done when ``n_completed == quota``.
    n_claimed = models.PositiveIntegerField(default=0)
    n_completed = models.PositiveIntegerField(default=0)
    # Set when a study that stops early (``Study.stop_when_decided``) found the unit's score decided
    # (``annotations.services.stopping``): its quota was lowered to its claims then, so it takes nobody
    # more; the claims held then finish normally.
    decided_at = models.DateTimeField(null=True, blank=True)
    # A random position among the study's units, fixed when the unit is built: a claim takes the
    # least-filled units from a random point of this key onwards (wrapping around), read from the
    # index ``unit_claim_order`` instead of sorting the study's units.
    rand_key = models.IntegerField(default=unit_rand_key, editable=False)

    class Meta:
        constraints = [
            # One unit per (item or generalization question) and source; partial indexes so that
            # SQLite enforces it too (it has no NULLS NOT DISTINCT).
            models.UniqueConstraint(
                fields=["study", "item", "source"],
                condition=Q(generalization_question__isnull=True, source__isnull=False),
                name="unit_unique_item_source",
            ),
            models.UniqueConstraint(
                fields=["study", "item"],
                condition=Q(generalization_question__isnull=True, source__isnull=True),
                name="unit_unique_item",
            ),
            models.UniqueConstraint(
                fields=["study", "generalization_question", "source"],
                condition=Q(generalization_question__isnull=False, source__isnull=False),
                name="unit_unique_genq_source",
            ),
            models.UniqueConstraint(
                fields=["study", "generalization_question"],
                condition=Q(generalization_question__isnull=False, source__isnull=True),
                name="unit_unique_genq",
            ),
            models.CheckConstraint(condition=Q(n_claimed__lte=models.F("quota")), name="unit_not_overfilled"),
            models.CheckConstraint(condition=Q(n_completed__lte=models.F("n_claimed")), name="unit_completed_le_claimed"),
        ]
        indexes = [
            # The claim's read (``annotations.services.assignment``): the study's units that take
            # workers, least filled first, then by random key. It is also the study's only index on
            # ``unit``, so the planner has no other way in: with statistics that predate a study
            # (its id unknown to them, every plan looks cheap) a plain study index plus a sort of
            # the whole study was chosen over it. Full units (whatever their quota) sort apart.
            models.Index(F("study"), LessThan(F("n_claimed"), F("quota")), F("n_claimed"), F("rand_key"),
                         name="unit_claim_order"),
        ]

    def __str__(self) -> str:
        return f"unit {self.pk} ({self.question_key}, source {self.source_id})"


def _check_correct_answer(question) -> None:
    """An attention check's or a test question's right answer is one of its choices, and each
    choice can be answered (``label_length_problem``)."""
    problems = question_choices_problems(question.choices, question.correct_answer,
                                         length_checked=label_length_checked(question))
    if problems:
        raise ValidationError(problems)


class AttentionCheck(models.Model):
    """A question with a known answer, mixed into tasks to catch inattentive work."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="attention_checks")
    question = models.TextField()
    choices = models.JSONField(default=list)
    correct_answer = models.CharField(max_length=50)

    def __str__(self) -> str:
        return self.question[:60]

    def clean(self) -> None:
        _check_correct_answer(self)


class QualificationTest(models.Model):
    study = models.OneToOneField(Study, on_delete=models.CASCADE, related_name="qualification_test")
    pass_mark = models.PositiveIntegerField(help_text="Correct answers needed to pass.")
    instructions = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"qualification for {self.study}"


class QualificationQuestion(models.Model):
    test = models.ForeignKey(QualificationTest, on_delete=models.CASCADE, related_name="questions")
    position = models.PositiveIntegerField(default=0)
    question = models.TextField()
    choices = models.JSONField(default=list)
    correct_answer = models.CharField(max_length=50)

    class Meta:
        ordering = ["position", "id"]

    def clean(self) -> None:
        _check_correct_answer(self)


class QualificationGrant(models.Model):
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="qualification_grants")
    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="qualification_grants")
    passed = models.BooleanField()
    score = models.PositiveIntegerField()
    answers = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    # The task the test was taken in (``qualification.qualification_submit``); null for a grant from
    # before it was recorded, or imported. A failed grant taken in a task whose Prolific session
    # Prolific later denies, while confirming the one its participant comes with, is deleted at
    # that entry (``annotations.services.impostor.impostor_grant_void``): someone else took it with
    # their id.
    assignment = models.ForeignKey(
        "Assignment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The task the test was taken in (empty for grants from before it was recorded).")
    # The failed attempts set aside under an identity the app cannot authenticate (an MTurk worker id, a
    # typed identifier: ``annotations.services.impostor.grant_retake_start``), oldest first, each
    # ``{"task", "score", "answers", "taken_at", "voided_at", "retake_task"}``: the task it was taken
    # in, its grade and answers, when it was taken and set aside, and the task given to take the test
    # again. The grant's own fields are the latest attempt graded.
    voids = models.JSONField(
        default=list, blank=True,
        help_text="Failed attempts set aside because the test was taken again from a browser whose study "
                  "cookie did not name the task they were taken in (oldest first).")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "participant"], name="one_qualification_attempt"),
        ]

    @property
    def set_aside(self) -> bool:
        """Whether this grant's attempt (failed) was set aside and its retake not graded yet: the last
        void records the task this grant was taken in."""
        return self.passed is False and bool(self.voids) and self.voids[-1].get("task") == self.assignment_id

    @property
    def retake_task_id(self) -> int | None:
        """The task given to take the test again after this grant's attempt was set aside
        (``set_aside``), whose attempt replaces it when graded; None otherwise."""
        return self.voids[-1].get("retake_task") if self.set_aside else None

    def failed_in(self, task_id: int) -> bool:
        """Whether the test was failed in task ``task_id``: this grant's attempt, or a set-aside one
        (``voids``). A failed grant that records no task (from before tasks were recorded, or
        imported) was failed in any of its participant's tasks, as far as anyone can tell."""
        if any(void.get("task") == task_id for void in self.voids or ()):
            return True
        return self.passed is False and self.assignment_id in (task_id, None)


# The statuses of a task that holds its platform assignment: in progress or finished.
LIVE_OR_FINISHED = ("active", "submitted", "approved", "rejected")


class Assignment(models.Model):
    """One worker's task: ``units_per_task`` units (plus attention checks) in a fixed order."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUBMITTED = "submitted", "Submitted"
        EXPIRED = "expired", "Expired"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        RETURNED = "returned", "Returned"
        WITHDRAWN = "withdrawn", "Withdrawn (the participant's data was erased)"

    # Active work ends by submission, expiry or return; submitted work is reviewed once. A
    # participant's withdrawal (``annotations.services.withdrawal``) ends any task of theirs.
    STATUS = StatusMachine("status", {
        Status.ACTIVE: {Status.SUBMITTED, Status.EXPIRED, Status.RETURNED, Status.WITHDRAWN},
        Status.SUBMITTED: {Status.APPROVED, Status.REJECTED, Status.WITHDRAWN},
        Status.APPROVED: {Status.WITHDRAWN},
        Status.REJECTED: {Status.WITHDRAWN},
        Status.EXPIRED: {Status.WITHDRAWN},
        Status.RETURNED: {Status.WITHDRAWN},
    })

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="assignments")
    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="assignments")
    token = models.CharField(max_length=64, unique=True, default=new_token)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    # Platform references: MTurk assignmentId / HITId / turkSubmitTo, Prolific SESSION_ID / STUDY_ID.
    platform_assignment_id = models.CharField(max_length=200, blank=True)
    platform_task_id = models.CharField(max_length=200, blank=True)
    return_url = models.CharField(max_length=500, blank=True)
    completion_code = models.CharField(max_length=64, blank=True)
    consented_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    # The single-person link this task was started through (its completion code is the link's):
    # one person may hold several links of a study, each link's task is its own.
    participant_link = models.ForeignKey(
        "annotations.ParticipantLink", null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks"
    )
    # The open link this task was started through (``services.participants.open_link_join``): a
    # place on an open link is held by those who joined through it, not by everyone who took part
    # in the study. Empty for other ways in, and for tasks started before it was recorded.
    open_link = models.ForeignKey(
        "annotations.OpenLink", null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks"
    )
    # Set when the task starts while the study's qualification test stands between this worker
    # and the questions; cleared when they pass it. The answer and submit services refuse while
    # it is set (read with the row lock they take anyway, so the check costs no query).
    qualification_pending = models.BooleanField(default=False)
    # Set when the researcher ended the task (a block: ``platforms.blocks._tasks_in_progress_end``),
    # not the worker: its page then asks the worker to return it on the platform, and never says
    # they left it (``selectors.assignment_page``).
    ended_by_researcher = models.BooleanField(default=False)
    # Set when the app ended the task at its participant's Prolific entry because someone else
    # started it with their id: Prolific confirmed the session the participant came with as theirs
    # in this study and denied the session this task was started with
    # (``annotations.services.impostor``). Returned, so its answers never count.
    ended_as_impostor = models.BooleanField(
        default=False, help_text="Ended at its participant's entry: Prolific denied the session it was started "
                                 "with and confirmed theirs, so someone else started it with their Prolific id.")

    class Meta:
        indexes = [models.Index(fields=["study", "status", "expires_at"])]
        constraints = [
            # A worker holds at most one active task per study: a double click on "start" or a
            # second tab resumes the first instead of claiming a second set of units.
            models.UniqueConstraint(
                fields=["study", "participant"],
                condition=Q(status="active"),
                name="assignment_one_active_per_worker",
            ),
            # A platform assignment (MTurk assignmentId, Prolific SESSION_ID) has at most one
            # local task in progress or finished: one completion code, one approval, one payment.
            # An expired or returned task gave its questions back and counts as not taken.
            models.UniqueConstraint(
                fields=["study", "platform_assignment_id"],
                condition=~Q(platform_assignment_id="") & Q(status__in=LIVE_OR_FINISHED),
                name="assignment_one_task_per_platform_assignment",
            ),
        ]

    def __str__(self) -> str:
        return f"assignment {self.pk} of {self.participant} in {self.study}"


class Claim(models.Model):
    """A unit (or an attention check) placed in an assignment at a position."""

    @staticmethod
    def attention_key(check_id: int, task_id: int | None = None) -> str:
        """The ``question_key`` of an attention check's claim: ``attn:<check>``, or, for a check
        given again in a later task (``services.assignment._add_attention_checks``: the first claim
        keeps the plain key), ``attn:<check>:<task>``. The one writer of the format: the claim, the
        bundle's export and its import."""
        return f"attn:{check_id}" if task_id is None else f"attn:{check_id}:{task_id}"

    @staticmethod
    def attention_key_names_task(key: str) -> bool:
        """Whether an attention check's ``question_key`` has the task part (``attention_key``)."""
        return (key or "").count(":") >= 2

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="claims")
    unit = models.ForeignKey(Unit, null=True, blank=True, on_delete=models.CASCADE, related_name="claims")
    attention_check = models.ForeignKey(AttentionCheck, null=True, blank=True, on_delete=models.CASCADE)
    # Denormalised from the assignment and unit so that the database enforces no-repeat.
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+")
    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="+")
    question_key = models.CharField(max_length=100)
    position = models.PositiveIntegerField()
    completed_at = models.DateTimeField(null=True, blank=True)
    released = models.BooleanField(
        default=False,
        help_text="Given back: its assignment expired, was returned or was rejected; the place went back to the pool.",
    )

    class Meta:
        ordering = ["assignment_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["assignment", "position"], name="claim_unique_position"),
            models.UniqueConstraint(
                fields=["study", "participant", "question_key"], name="claim_worker_sees_question_once"
            ),
            models.CheckConstraint(
                condition=Q(unit__isnull=False, attention_check__isnull=True)
                | Q(unit__isnull=True, attention_check__isnull=False),
                name="claim_unit_xor_attention_check",
            ),
        ]


def answer_time():
    """Now: the default time of an answer (``timezone.now`` looked up at each call)."""
    return timezone.now()


class Annotation(models.Model):
    """One answer to one step of a claimed unit. Written once: never updated."""

    class Step(models.TextChoices):
        BEFORE = "before", "Answer before the rationale"
        AFTER = "after", "Answer after the rationale"
        VALIDATION = "validation", "Question validation"
        PROPERTIES = "properties", "Rationale properties"
        ATTENTION = "attention", "Attention check"

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="annotations")
    step = models.CharField(max_length=20, choices=Step.choices)
    answer = models.CharField(max_length=50, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    shown_at = models.DateTimeField(null=True, blank=True)
    # Stamped when the answer is stored (``answer_time``: read at save time, like auto_now_add, but
    # a value given is kept, so that a study bundle's import keeps each answer's original time).
    answered_at = models.DateTimeField(default=answer_time, editable=False, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["claim_id", "answered_at"]
        constraints = [
            models.UniqueConstraint(fields=["claim", "step"], name="annotation_once_per_step"),
        ]
