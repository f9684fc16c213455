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

from annotations.models import Annotation, Assignment, FlagReview, Participant, Unit
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
    timer = _QuestionTimer()  # per worker
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
        timer.add(pid, claim_id, done, ms)
    for pid, seconds in timer.medians().items():
        records[pid].seconds_per_question = seconds
    return sorted(records.values(), key=lambda r: r.pseudonym)


# How a worker's (or a task's) time per question is measured: said wherever it is compared with
# ``annotations.selectors.cost.MIN_PLAUSIBLE_SECONDS_PER_QUESTION``.
SECONDS_PER_QUESTION_RULE = (
    "the median, over the questions answered in full (attention checks included), of the seconds each took: "
    "the sum of its steps' recorded durations, each from when the step became the one the task asks (the "
    "previous question's completion, or the first answer for the explanation step) to its answer (a question with "
    "an untimed step is left out; with none timed there is no figure)")


class _QuestionTimer:
    """Seconds per question (``SECONDS_PER_QUESTION_RULE``) per owner (a worker, a task): ``add``
    each answer, ``medians`` gives each owner's figure, rounded to a tenth of a second."""

    def __init__(self) -> None:
        self._ms: dict[int, tuple[int, int | None]] = {}  # claim -> (owner, ms); None if a step is untimed

    def add(self, owner: int, claim_id: int, completed_at, ms: int | None) -> None:
        if completed_at is None:
            return  # time per question: of questions answered in full
        previous = self._ms.get(claim_id, (owner, 0))
        self._ms[claim_id] = (owner, None if (ms is None or previous[1] is None) else previous[1] + ms)

    def medians(self) -> dict[int, float]:
        per_owner: dict[int, list[float]] = {}
        for owner, total in self._ms.values():
            if total is not None:
                per_owner.setdefault(owner, []).append(total / 1000)
        return {owner: round(statistics.median(seconds), 1) for owner, seconds in per_owner.items()}


def _tasks_timed(tasks: QuerySet[Assignment], *, pooled: bool) -> dict[int, float]:
    # One query over the answers of ``tasks`` (a subquery, not a list of ids): owner 0 pools them.
    timer = _QuestionTimer()
    for task_id, claim_id, done, ms in (Annotation.objects.filter(claim__assignment__in=tasks)
                                        .values_list("claim__assignment_id", "claim_id", "claim__completed_at",
                                                     "duration_ms").order_by()):
        timer.add(0 if pooled else task_id, claim_id, done, ms)
    return timer.medians()


def task_seconds_per_question(*, tasks: QuerySet[Assignment]) -> dict[int, float]:
    """Each of ``tasks``' seconds per question, by task id (``SECONDS_PER_QUESTION_RULE``, the
    figure a worker's record gives over all their tasks); a task with no timed question is absent."""
    return _tasks_timed(tasks, pooled=False)


def tasks_seconds_per_question(*, tasks: QuerySet[Assignment]) -> float | None:
    """The seconds per question of ``tasks`` taken together (``SECONDS_PER_QUESTION_RULE`` over all
    their questions, as a worker's record takes it over all their tasks); None when none is timed.
    One query, whatever the number of tasks: the cost reading's pace check reads it."""
    return _tasks_timed(tasks, pooled=True).get(0)


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
    """How many of a study's tasks (or one worker's) failed an attention check they answered, and
    ``rejectable``: each worker with a failed check, by participant id, with the ids of their tasks
    of the study that can still be rejected (submitted, not yet approved or rejected: what the
    worker page's reject form takes), in order; a worker with none has an empty list."""

    tasks_checked: int = 0
    tasks_failed: int = 0
    workers_failed: int = 0
    rejectable: dict[int, list[int]] = field(default_factory=dict)

    @property
    def warning(self) -> str:
        if not self.tasks_failed:
            return ""
        return (f"{self.tasks_failed} of {self.tasks_checked} task(s) with an attention check failed it "
                f"({self.workers_failed} worker(s)): read their answers before approving or scoring them.")

    @property
    def rejectable_tasks(self) -> list[tuple[int, int]]:
        """Every task of ``rejectable`` as (participant id, task id), by task id: the warning links
        each to its worker's page, where it is rejected."""
        return sorted(((worker, task) for worker, tasks in self.rejectable.items() for task in tasks),
                      key=lambda pair: pair[1])


def study_attention_failures(*, study: Study, participant: Participant | None = None) -> AttentionFailures:
    """The attention checks answered in ``study`` (by ``participant`` when given), per task, and the
    tasks of each worker who failed one that can still be rejected. Each check is asked once per
    worker (``annotations.services.assignment``): one failed in a task the worker returned (which
    cannot be rejected) is not asked in their next task, so the submitted task to reject may have
    no check of its own. Two queries at most, whatever the number of tasks."""
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
    rejectable: dict[int, list[int]] = {worker: [] for worker in sorted(set(failed.values()))}
    if rejectable:
        for worker, task in (Assignment.objects.filter(study_id=study.pk, status=Assignment.Status.SUBMITTED,
                                                       participant_id__in=list(rejectable))
                             .values_list("participant_id", "pk").order_by("participant_id", "pk")):
            rejectable[worker].append(task)
    return AttentionFailures(tasks_checked=len(checked), tasks_failed=len(failed),
                             workers_failed=len(rejectable), rejectable=rejectable)


# What an accepted flag is about, so which units it concerns (``units_with_accepted_flags``). The
# step page asks before the explanation is shown for "a problem with this question" and after it
# for "a problem with this question or explanation" (``annotations.services.steps.clean_flag``).
ACCEPTED_FLAG_SCOPE = (
    "a flag a researcher accepted (FlagReview 'accepted': a real problem) on a first (before) answer was given "
    "before the explanation was shown, so it is about the question: it concerns every unit asking that question "
    "(the item, or in a generalization study the generalization question, under every source); one on a second "
    "(after) answer may be about the question or the explanation: it concerns its own unit (that item and source)")


def study_accepted_flags(*, study: Study) -> QuerySet[Annotation]:
    """The answers to ``study``'s questions whose flag a researcher accepted (``FlagReview``
    accepted: the question or the explanation has a real problem), whatever their task became."""
    return Annotation.objects.filter(claim__study_id=study.pk, claim__unit__isnull=False,
                                     flag_review__decision=FlagReview.Decision.ACCEPTED)


def units_with_accepted_flags(*, study: Study) -> QuerySet[Unit]:
    """The units of ``study`` an accepted flag concerns (``ACCEPTED_FLAG_SCOPE``): the flagged
    unit, and with a flag on the first answer every unit asking the same question."""
    accepted = study_accepted_flags(study=study)
    question = Coalesce("generalization_question_id", Value(0))
    same_question = (accepted.filter(step=Step.BEFORE)
                     .alias(_question=Coalesce("claim__unit__generalization_question_id", Value(0)))
                     .filter(claim__unit__item_id=OuterRef("item_id"), _question=OuterRef("_question")))
    return (Unit.objects.filter(study_id=study.pk).alias(_question=question)
            .filter(Q(pk__in=accepted.values("claim__unit_id")) | Exists(same_question)))
