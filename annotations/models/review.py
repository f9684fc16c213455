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
    # Who decided (an accepted flag can be paid a bonus) is kept: PROTECT refuses deleting the
    # account (deactivate it instead). None: no account (a task, the shell).
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
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
    """A researcher's block of a worker (``annotations.services.platforms.blocks.worker_block``).
    It covers the study it was made on and every study owned by the researcher who made it
    (``annotations.selectors.participant_blocked``), never another researcher's. ``everywhere``:
    a superuser's block of the worker in every study (it also sets ``Participant.blocked`` and
    blocks the worker on the MTurk account)."""

    participant = models.ForeignKey(Participant, on_delete=models.CASCADE, related_name="blocks")
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="worker_blocks")
    # Who blocked the worker is kept, and with it the studies the block covers (theirs; None: its
    # study only, ``blocks_covering``): PROTECT refuses deleting the account (deactivate it instead).
    researcher = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    everywhere = models.BooleanField(default=False)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["participant", "researcher"])]

    def __str__(self) -> str:
        return f"{self.participant} blocked ({'everywhere' if self.everywhere else f'from study {self.study_id}'})"


# The lock (``lab.dblocks.transaction_lock``, keyed by the study's id) that orders a study's
# withdrawals against the writers of what a withdrawal erases and that have no row of the worker to
# wait for, because they are about to make it (sync storing a platform row; a bundle import copying
# the study, keyed by the original's id, whose copy a withdrawal must find): a withdrawal holds it
# alone, from the start of its transaction; such a writer holds it shared and, after taking it, reads
# the withdrawals (``Withdrawal``) before writing.
WITHDRAWAL_LOCK = "annotations.withdrawal"


class Withdrawal(models.Model):
    """The audit record of a participant's withdrawal from a study
    (``annotations.services.withdrawal.participant_withdraw``): who withdrew them and when, and how
    much was erased, without the personal data. ``digest`` is ``lab.pseudonyms.withdrawal_digest``
    (one-way, neither the pseudonym nor the platform id): a later sync skips the platform's rows of
    that worker, and the worker is not given another task in the study. One row per study and
    participant: withdrawing again updates it."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="withdrawals")
    digest = models.CharField(max_length=64)
    # Who erased the participant's answers is kept: PROTECT refuses deleting the account (deactivate
    # it instead). None: no account (a task, the shell).
    withdrawn_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    withdrawn_at = models.DateTimeField(auto_now_add=True)
    last_applied_at = models.DateTimeField(auto_now=True)
    n_answers = models.PositiveIntegerField(default=0, help_text="Answers erased (every step of every task).")
    n_counted_answers = models.PositiveIntegerField(
        default=0, help_text="Of those, answers that counted (were scored) when they were erased.")
    n_tasks = models.PositiveIntegerField(default=0, help_text="Tasks ended and emptied.")

    class Meta:
        ordering = ["-withdrawn_at"]
        constraints = [
            models.UniqueConstraint(fields=["study", "digest"], name="withdrawal_one_per_participant"),
        ]

    def __str__(self) -> str:
        return f"withdrawal {self.pk} from {self.study} ({self.withdrawn_at:%Y-%m-%d})"
