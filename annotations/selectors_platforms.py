"""Reads of the crowd-platform part: what a study costs and pays, bonus candidates, and the
overview the researcher's publish page shows."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum

from annotations.models import (
    Annotation,
    Assignment,
    Bonus,
    PlatformCall,
    PlatformSubmission,
    Publication,
)
from annotations.platforms import get_platform
from annotations.platforms.base import CostEstimate, money
from studies.design import study_capacity
from studies.models import Platform, Study

DONE_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED)


def study_prolific_study_ids(*, study: Study) -> set[str]:
    """The Prolific study ids ``study`` was published as (dry runs aside). A worker's
    ``STUDY_ID`` must be one of them (``annotations.platforms.handoff.arrival_parse``)."""
    ids: set[str] = set()
    for external_ids in Publication.objects.filter(
        study_id=study.pk, platform=Platform.PROLIFIC, dry_run=False
    ).values_list("external_ids", flat=True):
        ids.update(str(entry["study_id"]) for entry in external_ids or [] if entry.get("study_id"))
    return ids


def study_task_count(*, study: Study) -> tuple[int, int]:
    """(answers to collect, tasks) for ``study``, under the assignment rule
    (``studies.design.study_capacity``: a task holds at most one unit of each question)."""
    capacity = study_capacity(study=study)
    return capacity.answers, capacity.tasks


def study_cost_estimate(*, study: Study, platform_name: str | None = None,
                        max_assignments_per_hit: int | None = None) -> CostEstimate:
    name = platform_name or study.platform
    if name not in Platform.values:
        name = study.platform
    platform = get_platform(name)
    _, n_tasks = study_task_count(study=study)
    per_hit = max_assignments_per_hit or settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT
    return platform.estimate_cost(spec_reward=study.reward, n_tasks=n_tasks, max_assignments_per_hit=per_hit)


@dataclass
class HourlyPay:
    reward: Decimal
    floor: Decimal
    estimate_minutes: Decimal
    estimate_hourly: Decimal
    n_recorded: int = 0
    median_minutes: float | None = None
    p25_minutes: float | None = None
    p75_minutes: float | None = None
    min_minutes: float | None = None
    max_minutes: float | None = None
    active_median_minutes: float | None = None
    hourly_median: Decimal | None = None
    hourly_p75: Decimal | None = None
    below_floor: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def basis(self) -> str:
        return "recorded" if self.n_recorded else "estimate"

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for key, value in self.__dict__.items():
            out[key] = str(value) if isinstance(value, Decimal) else value
        out["basis"] = self.basis
        return out


def _hourly(reward: Decimal, minutes: float) -> Decimal:
    if minutes <= 0:
        return Decimal("0")
    return money(reward * Decimal(60) / Decimal(str(minutes)))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def study_effective_hourly_pay(*, study: Study) -> HourlyPay:
    """Effective hourly pay from recorded task times (assignment start to submission; the sum of
    the answer durations as "active" time where recorded), with the median and spread, against
    the study's floor. Before any task is done, the estimate from ``estimated_minutes_per_task``."""
    reward = money(study.reward)
    floor = money(study.hourly_pay_floor)
    estimate_minutes = Decimal(study.estimated_minutes_per_task)
    result = HourlyPay(reward=reward, floor=floor, estimate_minutes=estimate_minutes,
                       estimate_hourly=_hourly(reward, float(estimate_minutes)))
    rows = Assignment.objects.filter(study=study, status__in=DONE_STATUSES, submitted_at__isnull=False).values_list(
        "id", "created_at", "submitted_at"
    )
    minutes = [max(0.0, (submitted - created).total_seconds() / 60) for _, created, submitted in rows]
    if minutes:
        result.n_recorded = len(minutes)
        result.median_minutes = round(statistics.median(minutes), 2)
        result.p25_minutes = round(_quantile(minutes, 0.25), 2)
        result.p75_minutes = round(_quantile(minutes, 0.75), 2)
        result.min_minutes = round(min(minutes), 2)
        result.max_minutes = round(max(minutes), 2)
        result.hourly_median = _hourly(reward, result.median_minutes)
        result.hourly_p75 = _hourly(reward, result.p75_minutes)
        active = (
            Annotation.objects.filter(claim__assignment__in=[row[0] for row in rows], duration_ms__isnull=False)
            .values("claim__assignment")
            .annotate(total=Sum("duration_ms"))
            .values_list("total", flat=True)
        )
        active_minutes = [total / 60000 for total in active if total]
        if active_minutes:
            result.active_median_minutes = round(statistics.median(active_minutes), 2)
        pay = result.hourly_median
        if pay < floor:
            result.below_floor = True
            result.warnings.append(
                f"Median recorded time {result.median_minutes} min gives {pay}/hour, below the floor of "
                f"{floor}/hour: raise the reward to at least {money(floor * Decimal(str(result.median_minutes)) / 60)} "
                "or pay the difference as a bonus."
            )
        elif result.hourly_p75 is not None and result.hourly_p75 < floor:
            result.warnings.append(
                f"A quarter of workers took {result.p75_minutes} min or more, which pays {result.hourly_p75}/hour, "
                f"below the floor of {floor}/hour."
            )
    elif result.estimate_hourly < floor:
        result.below_floor = True
        result.warnings.append(
            f"At the estimated {estimate_minutes} min a task, {reward} pays {result.estimate_hourly}/hour, below "
            f"the floor of {floor}/hour: raise the reward to at least "
            f"{money(floor * estimate_minutes / 60)}."
        )
    return result


def study_bonus_candidates(*, study: Study, min_accuracy: float = 0.8) -> dict[str, list[int]]:
    """Assignment ids that earn the SPEC's bonuses: ``flagged_error`` (an answer whose payload
    carries a truthy ``"flag"``: the worker reported a broken question) and ``good_work`` (every
    attention check passed, and the final answers match the gold answer at least ``min_accuracy``
    of the time)."""
    done = Assignment.objects.filter(study=study, status__in=[Assignment.Status.SUBMITTED, Assignment.Status.APPROVED])
    flagged, good = set(), []
    stats: dict[int, dict[str, int]] = {}
    rows = Annotation.objects.filter(claim__assignment__in=done).values_list(
        "claim__assignment", "step", "answer", "payload", "claim__unit__item__gold_answer",
        "claim__unit__generalization_question__answer")
    final_steps = {Annotation.Step.AFTER, Annotation.Step.VALIDATION}
    for assignment_id, step, answer, payload, gold, genq_answer in rows:
        entry = stats.setdefault(assignment_id, {"checks": 0, "checks_ok": 0, "answers": 0, "correct": 0})
        if isinstance(payload, dict) and payload.get("flag"):
            flagged.add(assignment_id)
        if step == Annotation.Step.ATTENTION:
            entry["checks"] += 1
            entry["checks_ok"] += int(bool((payload or {}).get("correct")))
        elif step in final_steps and (genq_answer or gold):
            entry["answers"] += 1
            entry["correct"] += int(answer == (genq_answer or gold))
    for assignment_id, entry in sorted(stats.items()):
        if entry["checks"] and entry["checks_ok"] < entry["checks"]:
            continue
        if entry["answers"] and entry["correct"] / entry["answers"] >= min_accuracy:
            good.append(assignment_id)
    return {"flagged_error": sorted(flagged), "good_work": good}


def study_platform_overview(*, study: Study) -> dict:
    """What the admin page shows: publications, submissions by flag, audit totals."""
    calls = PlatformCall.objects.filter(study=study)
    return {
        "publications": list(Publication.objects.filter(study=study).order_by("-created_at")),
        "assignments": dict(Assignment.objects.filter(study=study).values_list("status").annotate(n=Count("id"))),
        "flagged": PlatformSubmission.objects.filter(publication__study=study).exclude(flag="").count(),
        "calls": dict(calls.values_list("status").annotate(n=Count("id"))),
        "paid": calls.filter(status=PlatformCall.Status.CONFIRMED).aggregate(total=Sum("amount"))["total"]
        or Decimal("0"),
        "bonuses": Bonus.objects.filter(assignment__study=study).count(),
    }
