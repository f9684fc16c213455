"""How far a study is: the numbers of the researcher's live progress view and of the study list.

Every count of answers reads the one definition of "this answer counts"
(``annotations.selectors.claims_that_count``); time and pay read the one cost-and-pay reading of
``annotations.selectors.cost``. Nothing here writes."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from decimal import Decimal
from functools import reduce
from operator import or_

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from annotations.models import Annotation, Assignment, Claim, Unit
from annotations.platforms.base import money
from annotations.selectors import claims_that_count
from annotations.selectors.cost import (
    CostAndPay,
    PayReading,
    pay_reading,
    study_collects,
    study_cost_and_pay,
    study_effective_hourly_pay,
)
from annotations.selectors.platforms import assignments_on_hold, study_places
from annotations.services.stopping import close_waiting_on, study_answers_not_asked, units_stopped
from studies.design import tasks_for_places
from studies.models import Study


def _percent(part: int, whole: int) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


@dataclass
class SourceProgress:
    source_id: int | None
    name: str
    collected: int
    to_collect: int

    @property
    def percent(self) -> float:
        return _percent(self.collected, self.to_collect)


@dataclass
class StudyProgress:
    study_id: int
    status: str
    answers_collected: int
    answers_to_collect: int
    by_source: list[SourceProgress]
    units_total: int
    units_complete: int
    units_in_progress: int
    units_empty: int
    tasks_planned: int
    tasks: dict[str, int]
    # Of ``tasks``' "submitted" and "done", how many sync holds (``assignments_on_hold``: not
    # approved, paid or counted until a researcher clears them), as the publish page says.
    tasks_on_hold: dict[str, int]
    workers: int
    attention_answered: int
    attention_failed: int
    answers_flagged: int
    pay: PayReading
    at: str
    # Only for a study that stops a unit when its result is decided (``study_early_stopping``).
    early_stopping: EarlyStopping | None = None

    @property
    def percent(self) -> float:
        return _percent(self.answers_collected, self.answers_to_collect)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["percent"] = self.percent
        out["by_source"] = [{**asdict(s), "percent": s.percent} for s in self.by_source]
        pay = out["pay"]
        pay["figure"] = None if self.pay.figure is None else str(self.pay.figure)
        pay["floor"] = str(self.pay.floor)
        if self.early_stopping is not None:
            out["early_stopping"] = self.early_stopping.as_dict()
        return out


@dataclass
class EarlyStopping:
    """What stopping units once their result is decided (``Study.stop_when_decided``,
    ``annotations.services.stopping``) has saved so far: the answers the decided units will never
    collect (the design's workers per unit less their lowered quota, over the units stopping decided:
    ``stopping.study_answers_not_asked``; ``answers_not_asked_invalid_questions``: those the units of a
    generalization question marked invalid will not collect, which stopping did not save) and the money, counted in tasks
    because a platform pays per task (a task of one unit pays the full reward): the places published
    (``selectors.platforms.study_places``; the design's tasks before any publication)
    less the tasks taken (active, submitted, approved) and, while the study is open, less the tasks
    its units still need (``tasks_for_places``, the assignment rule); at the cost of a task, rewards
    and fee (``selectors_cost.study_cost_and_pay``). ``places_released``: the places the study's
    close released (None while it is not closed). ``close_waits_on_tasks``: every unit is decided but
    the app's close waits for the platform to list these tasks' work as submitted
    (``stopping.close_waiting_on``; 0 when it does not wait)."""

    units_decided: int  # decided with fewer than the design's workers: the units that stopped early
    answers_collected: int
    answers_saved: int
    answers_designed: int
    cost_per_answer: Decimal
    money_saved: Decimal
    currency: str
    places_published: int = 0
    tasks_taken: int = 0
    tasks_saved: int = 0
    cost_per_task: Decimal = Decimal("0.00")
    places_released: int | None = None
    answers_not_asked_invalid_questions: int = 0
    close_waits_on_tasks: int = 0
    # How a task is priced (``PRICED_AS``): the platform and fee rate the money saved rests on.
    priced_as: str = ""

    @property
    def percent_saved(self) -> float:
        return _percent(self.answers_saved, self.answers_designed)

    def as_dict(self) -> dict:
        return {"units_decided": self.units_decided, "answers_collected": self.answers_collected,
                "answers_saved": self.answers_saved,
                "answers_designed": self.answers_designed, "percent_saved": self.percent_saved,
                "cost_per_answer": str(self.cost_per_answer), "money_saved": str(self.money_saved),
                "currency": self.currency, "places_published": self.places_published,
                "tasks_taken": self.tasks_taken, "tasks_saved": self.tasks_saved,
                "cost_per_task": str(self.cost_per_task), "places_released": self.places_released,
                "answers_not_asked_invalid_questions": self.answers_not_asked_invalid_questions,
                "close_waits_on_tasks": self.close_waits_on_tasks, "priced_as": self.priced_as}


def _tasks_by_places(study: Study) -> tuple[int, int]:
    """From one read of ``study``'s units, under the assignment rule (``tasks_for_places``): the
    tasks its units still need (their answers not yet claimed, quota less ``n_claimed``, per
    question), and the tasks early stopping saved (those the design's places need less those the
    quotas, as stopping lowered them, need: only the units stopping decided count lowered,
    ``stopping.units_stopped``, the rule of ``stopping.study_answers_not_asked``; whatever else left
    places empty is not counted, nor the units of a generalization question marked invalid, nor one
    marked valid again after the study closed, whose quota stays lowered though nothing decided it)."""
    needed: Counter = Counter()
    designed: Counter = Counter()
    lowered: Counter = Counter()
    units = Unit.objects.filter(study=study)
    stopped = set(units_stopped(units).values_list("id", flat=True))
    for unit_id, key, quota, claimed in units.values_list("id", "question_key", "quota", "n_claimed"):
        needed[key] += max(0, quota - claimed)
        designed[key] += study.annotators_per_unit
        lowered[key] += quota if unit_id in stopped else max(quota, study.annotators_per_unit)
    per_task = study.units_per_task
    return (tasks_for_places(places=needed, units_per_task=per_task),
            max(0, tasks_for_places(places=designed, units_per_task=per_task)
                - tasks_for_places(places=lowered, units_per_task=per_task)))


# What the money saved rests on: the cost of a task as this installation prices the study now
# (``study_cost_and_pay``), which is not what the platform charged when it was published. The fees
# are named as the share of the rewards they add up to in that price (MTurk's differ by HIT size,
# with a minimum per assignment).
PRICED_AS = ("a task's reward and {platform}'s fees, {rate:.2%} of the rewards, as this installation prices the study "
             "now (its fee settings: {settings}), not necessarily what {platform} charged")
PRICED_AS_NO_FEE = "a task's reward: participant links charge no fee (the app pays no one through them)"
FEE_SETTINGS = {"prolific": "RL_PROLIFIC_FEE_RATE",
                "mturk": "RL_MTURK_FEE_RATE, or RL_MTURK_LARGE_HIT_FEE_RATE on HITs of RL_MTURK_LARGE_HIT_ASSIGNMENTS "
                         "or more assignments, at least RL_MTURK_MIN_FEE each; HITs of "
                         "RL_MTURK_MAX_ASSIGNMENTS_PER_HIT"}


def _priced_as(estimate) -> str:
    """``PRICED_AS`` for a cost estimate: its platform, the fees' share of the rewards, the settings."""
    if estimate.platform not in FEE_SETTINGS:
        return PRICED_AS_NO_FEE
    rate = (estimate.total - estimate.rewards) / estimate.rewards if estimate.rewards else estimate.fee_rate
    return PRICED_AS.format(platform=estimate.platform, rate=rate, settings=FEE_SETTINGS[estimate.platform])


def study_early_stopping(*, study: Study, cost: CostAndPay | None = None) -> EarlyStopping | None:
    """Answers and money saved by stopping early so far (``EarlyStopping``); None for a study that
    does not stop early. ``cost``: the study's cost reading on its own platform when the caller has
    it already (the publish page; never a quote for another platform)."""
    if not study.stop_when_decided:
        return None
    designed = Unit.objects.filter(study=study).count() * study.annotators_per_unit
    not_asked = study_answers_not_asked(study=study)
    cost = cost or study_cost_and_pay(study=study)
    per_answer = money(cost.estimate.total / cost.answers) if cost.answers else Decimal("0.00")
    per_task = cost.estimate.total / cost.tasks if cost.tasks else Decimal("0")
    published, taken, released = study_places(study=study)
    places = published or cost.tasks
    closed = study.status == Study.Status.CLOSED
    # Places left empty, capped at the tasks the lowered quotas account for: a close by hand, or a
    # study short of workers, leaves places empty that stopping early did not save.
    still_needed, stopping_saved = _tasks_by_places(study)
    tasks_saved = min(max(0, places - taken - (0 if closed else still_needed)), stopping_saved)
    return EarlyStopping(units_decided=not_asked.units_decided,
                         answers_collected=claims_that_count(study=study).count(),
                         answers_saved=not_asked.saved_by_stopping, answers_designed=designed,
                         answers_not_asked_invalid_questions=not_asked.invalid_questions,
                         cost_per_answer=per_answer, money_saved=money(per_task * tasks_saved),
                         currency=cost.estimate.currency, places_published=places, tasks_taken=taken,
                         tasks_saved=tasks_saved, cost_per_task=money(per_task),
                         places_released=released, close_waits_on_tasks=close_waiting_on(study=study),
                         priced_as=_priced_as(cost.estimate))


def _counted_by_unit(study: Study) -> dict[int, int]:
    return dict(claims_that_count(study=study).values_list("unit_id").annotate(n=Count("id")).order_by())


def study_progress(*, study: Study, now=None) -> StudyProgress:
    """Where ``study`` stands now: answers collected (that count) of answers to collect, per source
    and overall; units complete, in progress (some answers count or a worker holds it) and empty;
    tasks by state (and how many submitted and done tasks are on hold); workers so far; attention
    checks failed; reported problems; and the effective hourly pay from the recorded timings."""
    now = now or timezone.now()
    counted = _counted_by_unit(study)
    units = list(Unit.objects.filter(study=study).values_list("id", "quota", "source_id", "source__name", "question_key"))
    held = set(
        Claim.objects.filter(study_id=study.pk, unit__isnull=False, released=False,
                             assignment__status=Assignment.Status.ACTIVE)
        .values_list("unit_id", flat=True).distinct()
    )
    by_source: dict[int | None, SourceProgress] = {}
    complete = in_progress = empty = 0
    for unit_id, quota, source_id, source_name, _ in units:
        n = counted.get(unit_id, 0)
        entry = by_source.setdefault(source_id, SourceProgress(source_id, source_name or "(no source)", 0, 0))
        entry.collected += n
        entry.to_collect += quota
        if n >= quota:
            complete += 1
        elif n or unit_id in held:
            in_progress += 1
        else:
            empty += 1
    statuses = dict(Assignment.objects.filter(study=study).values_list("status").annotate(n=Count("id")).order_by())
    overdue = Assignment.objects.filter(study=study, status=Assignment.Status.ACTIVE, expires_at__lte=now).count()
    S = Assignment.Status
    tasks = {
        "in_progress": statuses.get(S.ACTIVE, 0) - overdue,
        "submitted": statuses.get(S.SUBMITTED, 0),
        "approved": statuses.get(S.APPROVED, 0),
        "rejected": statuses.get(S.REJECTED, 0),
        "returned": statuses.get(S.RETURNED, 0),
        "expired": statuses.get(S.EXPIRED, 0) + overdue,
    }
    tasks["done"] = tasks["submitted"] + tasks["approved"] + tasks["rejected"]
    held = dict(assignments_on_hold(study=study).values_list("status").annotate(n=Count("id")).order_by())
    tasks_on_hold = {"submitted": held.get(S.SUBMITTED, 0),
                     "done": held.get(S.SUBMITTED, 0) + held.get(S.APPROVED, 0) + held.get(S.REJECTED, 0)}
    answers_to_collect = sum(quota for _, quota, _, _, _ in units)
    # Tasks the study needs under the assignment rule (a task holds at most one unit of each
    # question): the one count the study page, the cost reading and a publish use (``study_collects``:
    # the units built at opening, an invalid generalization question's left out).
    capacity = study_collects(study=study)
    checks = Annotation.objects.filter(claim__study_id=study.pk, step=Annotation.Step.ATTENTION).aggregate(
        answered=Count("id"), failed=Count("id", filter=Q(payload__correct=False)))
    return StudyProgress(
        study_id=study.pk,
        status=study.status,
        answers_collected=sum(s.collected for s in by_source.values()),
        answers_to_collect=answers_to_collect,
        by_source=sorted(by_source.values(), key=lambda s: s.name),
        units_total=len(units),
        units_complete=complete,
        units_in_progress=in_progress,
        units_empty=empty,
        tasks_planned=capacity.tasks,
        tasks=tasks,
        tasks_on_hold=tasks_on_hold,
        workers=Assignment.objects.filter(study=study).exclude(status=Assignment.Status.WITHDRAWN)
        .values("participant_id").distinct().count(),
        attention_answered=checks["answered"],
        attention_failed=checks["failed"],
        answers_flagged=Annotation.objects.filter(claim__study_id=study.pk, payload__flag=True).count(),
        pay=pay_reading(hourly=study_effective_hourly_pay(study=study)),
        at=now.isoformat(),
        early_stopping=study_early_stopping(study=study),
    )


@dataclass
class Completion:
    collected: int
    to_collect: int

    @property
    def percent(self) -> float:
        return _percent(self.collected, self.to_collect)


def studies_completion(*, studies: list[Study] | QuerySet[Study]) -> dict[int, Completion]:
    """Answers that count of answers to collect, for each of ``studies`` (the study list's
    column): two queries whatever the number of studies."""
    studies = list(studies)
    if not studies:
        return {}
    quotas = dict(Unit.objects.filter(study__in=studies).values_list("study_id").annotate(n=Sum("quota")).order_by())
    counting = reduce(or_, (claims_that_count(study=s) for s in studies))
    counted = dict(counting.values_list("study_id").annotate(n=Count("id")).order_by())
    return {s.pk: Completion(collected=counted.get(s.pk, 0), to_collect=quotas.get(s.pk, 0)) for s in studies}
