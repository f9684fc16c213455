"""Reads for reviewing a study's work: each answer with what a reviewer needs beside it (the
right answer, whether it was right, both steps of the question), and each worker's record in a
study (answers, accuracy on attention checks and on gold, time per question, reported problems,
tasks). Nothing here writes; reviews go through ``annotations.services.platforms``."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    Exists,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce

from annotations.models import Annotation, Assignment, Participant
from annotations.selectors import blocks_covering
from lab.pseudonyms import worker_pseudonym
from studies.models import Study

Step = Annotation.Step
# Steps whose answer is a choice with a right answer (the item's, the generalization question's
# or the attention check's); validation and property steps have none.
GRADED_STEPS = (Step.BEFORE, Step.AFTER, Step.ATTENTION)


def _step_answer(step: str):
    return Subquery(Annotation.objects.filter(claim_id=OuterRef("claim_id"), step=step).values("answer")[:1])


def answers_for_review(queryset: QuerySet[Annotation]) -> QuerySet[Annotation]:
    """``queryset`` with, on each answer: ``gold`` (the right answer of what was asked: the
    attention check's, the generalization question's or the item's), ``is_correct`` (True / False
    on graded steps, None elsewhere: the rule of ``annotations.choices.answer_is_correct``,
    exact label equality, in SQL), and
    ``before_answer`` / ``after_answer`` (both steps of the same question, whichever row this is)."""
    gold = Coalesce("claim__attention_check__correct_answer", "claim__unit__generalization_question__answer",
                    "claim__unit__item__gold_answer", output_field=CharField())
    graded = Q(step__in=GRADED_STEPS) & ~Q(_gold="") & ~Q(answer="") & Q(_gold__isnull=False)
    return queryset.alias(_gold=gold).annotate(
        gold=F("_gold"),
        is_correct=Case(
            When(graded & Q(answer=F("_gold")), then=Value(True)),
            When(graded, then=Value(False)),
            default=None, output_field=BooleanField(null=True),
        ),
        before_answer=_step_answer(Step.BEFORE),
        after_answer=_step_answer(Step.AFTER),
    )


@dataclass
class Accuracy:
    answered: int = 0
    correct: int = 0

    def add(self, correct: bool) -> None:
        self.answered += 1
        self.correct += int(correct)

    @property
    def percent(self) -> float | None:
        return round(100 * self.correct / self.answered, 1) if self.answered else None

    def __str__(self) -> str:
        return f"{self.correct}/{self.answered} ({self.percent}%)" if self.answered else "—"


@dataclass
class WorkerRecord:
    """One worker's record in one study."""

    participant_id: int
    platform: str
    pseudonym: str
    blocked: bool
    tasks: dict[str, int] = field(default_factory=dict)
    answers: int = 0
    attention: Accuracy = field(default_factory=Accuracy)
    before: Accuracy = field(default_factory=Accuracy)
    after: Accuracy = field(default_factory=Accuracy)
    seconds_per_question: float | None = None
    flags: int = 0

    @property
    def n_tasks(self) -> int:
        return sum(self.tasks.values())

    @property
    def failed_every_check(self) -> bool:
        return bool(self.attention.answered) and self.attention.correct == 0


def _records(study: Study, participants: QuerySet[Participant]) -> list[WorkerRecord]:
    # Blocked here: everywhere, or by a block that covers this study (``selectors.blocks_covering``).
    blocked_here = set(blocks_covering(study=study).filter(participant_id__in=participants.values("pk"))
                       .values_list("participant_id", flat=True))
    records = {
        p.pk: WorkerRecord(participant_id=p.pk, platform=p.platform, blocked=p.blocked or p.pk in blocked_here,
                           pseudonym=worker_pseudonym(p.platform, p.external_id))
        for p in participants.only("id", "platform", "external_id", "blocked")
    }
    for pid, status, n in (study_tasks(study=study).filter(participant_id__in=records)
                           .values_list("participant_id", "status").annotate(n=Count("id")).order_by()):
        records[pid].tasks[status] = n
    claim_ms: dict[int, tuple[int, int | None]] = {}  # claim -> (participant, ms); None if a step is untimed
    rows = answers_for_review(Annotation.objects.filter(claim__study_id=study.pk, claim__participant_id__in=records))
    for pid, claim_id, done, step, correct, payload, ms in rows.values_list(
            "claim__participant_id", "claim_id", "claim__completed_at", "step", "is_correct", "payload",
            "duration_ms").order_by():
        record = records[pid]
        record.answers += 1
        if correct is not None:
            {Step.ATTENTION: record.attention, Step.BEFORE: record.before, Step.AFTER: record.after}.get(
                step, Accuracy()).add(correct)
        if isinstance(payload, dict) and payload.get("flag"):
            record.flags += 1
        if done is None:
            continue  # time per question: of questions answered in full
        previous = claim_ms.get(claim_id, (pid, 0))
        claim_ms[claim_id] = (pid, None if (ms is None or previous[1] is None) else previous[1] + ms)
    per_worker: dict[int, list[float]] = {}
    for pid, total in claim_ms.values():
        if total is not None:
            per_worker.setdefault(pid, []).append(total / 1000)
    for pid, seconds in per_worker.items():
        records[pid].seconds_per_question = round(statistics.median(seconds), 1)
    return sorted(records.values(), key=lambda r: r.pseudonym)


def study_tasks(*, study: Study) -> QuerySet[Assignment]:
    """The tasks of ``study`` a reviewer sees: all but those of participants who withdrew (an
    emptied task kept only for the payment audit, ``annotations.services.withdrawal``)."""
    return Assignment.objects.filter(study=study).exclude(status=Assignment.Status.WITHDRAWN)


def study_participants(*, study: Study) -> QuerySet[Participant]:
    """Everyone who took a task in ``study`` (``study_tasks``): withdrawn participants are not."""
    return Participant.objects.filter(pk__in=study_tasks(study=study).values("participant_id"))


def study_workers(*, study: Study) -> list[WorkerRecord]:
    """Every worker who took a task in ``study`` (``study_participants``), with their record, by
    pseudonym."""
    return _records(study, study_participants(study=study))


def study_worker(*, study: Study, participant: Participant) -> WorkerRecord:
    """One worker's record in ``study``."""
    return _records(study, Participant.objects.filter(pk=participant.pk))[0]


def worker_assignments(*, study: Study, participant: Participant) -> QuerySet[Assignment]:
    """The worker's tasks in ``study``, newest first, with how many questions each answered."""
    return (study_tasks(study=study).filter(participant=participant)
            .annotate(n_questions=Count("claims", distinct=True),
                      n_answered=Count("claims", filter=Q(claims__completed_at__isnull=False), distinct=True))
            .prefetch_related("bonuses").order_by("-created_at"))


def assignments_failing_attention() -> QuerySet[Assignment]:
    """Tasks with at least one attention-check answer that is wrong (``answers_for_review``'s rule)."""
    wrong = answers_for_review(Annotation.objects.filter(claim__assignment_id=OuterRef("pk"), step=Step.ATTENTION))
    return Assignment.objects.filter(Exists(wrong.filter(is_correct=False)))


@dataclass
class AttentionFailures:
    """How many of a study's tasks (or one worker's) failed an attention check they answered."""

    tasks_checked: int = 0
    tasks_failed: int = 0
    workers_failed: int = 0

    @property
    def warning(self) -> str:
        if not self.tasks_failed:
            return ""
        return (f"{self.tasks_failed} of {self.tasks_checked} task(s) with an attention check failed it "
                f"({self.workers_failed} worker(s)): read their answers before approving or scoring them.")


def study_attention_failures(*, study: Study, participant: Participant | None = None) -> AttentionFailures:
    """The attention checks answered in ``study`` (by ``participant`` when given), per task."""
    answers = Annotation.objects.filter(claim__study_id=study.pk, step=Step.ATTENTION)
    if participant is not None:
        answers = answers.filter(claim__participant_id=participant.pk)
    checked: set[int] = set()
    failed: dict[int, int] = {}
    for assignment_id, participant_id, correct in answers_for_review(answers).values_list(
            "claim__assignment_id", "claim__participant_id", "is_correct").order_by():
        checked.add(assignment_id)
        if correct is False:
            failed[assignment_id] = participant_id
    return AttentionFailures(tasks_checked=len(checked), tasks_failed=len(failed),
                             workers_failed=len(set(failed.values())))
