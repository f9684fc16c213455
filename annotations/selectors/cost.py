"""The one cost-and-pay reading of a study (issue 11: the study page, the publish page, the API and
``publish_study --dry-run`` quote the same numbers): what it costs on a platform (the platform's
own estimate, its fee rate from settings: ``RL_MTURK_FEE_RATE``, ``RL_MTURK_LARGE_HIT_FEE_RATE``,
``RL_PROLIFIC_FEE_RATE``) and what it pays an hour (task times measured from the start of the task's
clock to its submission, ``TASK_TIME_RULE``, quoted only when there are enough of them and they are a
human pace)."""
from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum

from annotations.models import Annotation, Assignment, Claim, Unit
from annotations.platforms import get_platform
from annotations.platforms.base import CENT, CostEstimate, money
from annotations.selectors import COUNTING_ASSIGNMENT_STATUSES, on_hold
from annotations.selectors.entry import attention_checks_to_give
from annotations.selectors.review import tasks_seconds_per_question
from studies.design import Capacity, design_capacity, study_capacity
from studies.models import GeneralizationQuestion, Platform, Study

# Fewer timed tasks than this give no median worth quoting: the estimate stands until then.
MIN_TIMED_TASKS = 5
# Nobody reads a question (and, in a utility study, an explanation) and answers it in less than
# this: a median below it comes from bots, scripted tests or careless clicking, and the hourly
# pay it implies says nothing about what real workers earn.
MIN_PLAUSIBLE_SECONDS_PER_QUESTION = 5

# The tasks whose times the hourly pay is read from: the work that is paid or will be (submitted or
# approved, ``annotations.selectors.COUNTING_ASSIGNMENT_STATUSES``, and not held by sync,
# ``annotations.selectors.on_hold``: what "Approve all" and the bonuses treat as payable). Rejected
# work is not paid, and held work not until a researcher clears it: fast bot work among them would
# hide what the paid workers earn. Nor is a task whose unit claims are all released (no work of it counts
# or could): a bundle copy brings a task held at the origin in as submitted with its claims released (the
# platform's report that held it cannot travel), so "not on hold" there reads the claims.
TIMED_TASKS_RULE = "tasks paid or payable (submitted or approved, not on hold)"

# What a timed task's minutes are (``task_minutes``): from the start of its clock, as the deadlines
# count it (``Assignment.created_at``, written by ``assignment.assignment_start`` from
# ``deadlines.task_clock_start``), to its submission. For an MTurk or Prolific arrival that start is
# the landing page (or, on a re-entry with the same platform assignment, its first task's start:
# ``deadlines.platform_clock_start``), as the platform times the worker from the accept and pays by
# that time: reading the instructions before consenting is paid work. For a plain, open or
# single-person link the task is made at the consent, so its clock starts there.
TASK_TIME_RULE = "timed from the task's start (a platform arrival's landing page, a link's consent) to its submission"




@dataclass
class PayReading:
    """The effective hourly pay as it may honestly be quoted right now."""

    figure: Decimal | None  # the pay per hour to quote (recorded median when reliable, else the estimate)
    basis: str  # "recorded" or "estimate"
    text: str  # one sentence saying where the figure comes from
    timed_tasks: int
    median_minutes: float | None
    seconds_per_question: float | None  # ``review.SECONDS_PER_QUESTION_RULE`` over the timed tasks
    floor: Decimal
    below_floor: bool
    warnings: list[str] = field(default_factory=list)



def study_collects(*, study: Study) -> Capacity:
    """What ``study`` will collect, under the assignment rule (``studies.design.design_capacity``: a
    task holds at most one unit of each question): the one owner of the answers and tasks that the
    cost reading quotes and a publish sends.

    A draft: its design as it reads now (``studies.design.study_capacity``). Once opened: the units
    built at opening (their question keys, each unit asking the study's workers per unit), as the
    progress page counts its tasks and as the assignment hands them out; the design read live
    would change under an open study (a generalization question marked invalid, a rationale
    imported) while its units, and what it collects, do not. A study closed before it was opened
    has no units: its design is read, as a draft's. The units of a generalization question marked
    invalid after opening are left out: they take nobody more (``stopping.units_follow_question_validation``
    lowered their quota to the claims they held), and scoring leaves out their answers."""
    if study.pk is None or study.status == Study.Status.DRAFT:
        return study_capacity(study=study)
    # an open generalization study's units of a question marked invalid take nobody more; a closed
    # study collected what it collected, and a question-validation study asks about such questions
    counted = Count("id")
    if study.kind == Study.Kind.GENERALIZATION and study.status == Study.Status.OPEN:
        counted = Count("id", filter=~Q(
            generalization_question__validation_status=GeneralizationQuestion.Validation.INVALID))
    rows = list(Unit.objects.filter(study=study).values_list("question_key").annotate(n=counted).order_by())
    if not rows:
        return study_capacity(study=study)
    per_question = Counter({key: n for key, n in rows if n})
    return design_capacity(question_keys=per_question.elements(), quota=study.annotators_per_unit,
                           units_per_task=study.units_per_task)


def study_task_count(*, study: Study) -> tuple[int, int]:
    """(answers to collect, tasks) for ``study`` (``study_collects``)."""
    capacity = study_collects(study=study)
    return capacity.answers, capacity.tasks


def platform_minutes(*, study: Study) -> int:
    """The minutes a task of ``study`` is said to take on a platform (Prolific's
    estimated_completion_time, the MTurk description's "About N minutes"): the estimate rounded up
    to whole minutes, at least 1. The one owner: the publish sends these, and the estimate-based
    hourly pay and its floor check use them, so the pay quoted here is the pay workers are shown.
    Link studies send no minutes; their estimate uses the same ones, so every platform's quote reads
    alike."""
    return max(1, math.ceil(float(study.estimated_minutes_per_task)))


def reward_for_floor(*, floor: Decimal, minutes: Decimal) -> Decimal:
    """The smallest reward, in whole cents, that pays ``floor`` an hour for ``minutes`` of work:
    rounded up, never down, so the reward suggested passes the floor check that suggested it."""
    if minutes <= 0:
        return money(0)
    return (Decimal(floor) * Decimal(minutes) / 60).quantize(CENT, rounding=ROUND_CEILING)


def pays_below_floor(*, reward: Decimal, floor: Decimal, minutes: Decimal) -> bool:
    """Whether ``reward`` for ``minutes`` of work pays less than ``floor`` an hour: the one floor
    check of every pay reading. Exact, not the rounded hourly figure a page shows: a reward is in
    whole cents, so it pays the floor exactly when it is at least ``reward_for_floor``, the reward the
    warning suggests (5.33 for 40 minutes pays 7.995 an hour, shown as 8.00, and is below a floor of
    8.00: 5.34 meets it). No time (a recorded median of 0 minutes) has no hourly pay: below any floor
    above 0, as its figure of 0 reads."""
    if minutes <= 0:
        return floor > 0
    return money(reward) < reward_for_floor(floor=floor, minutes=minutes)


def _below(pay: Decimal, floor: Decimal) -> str:
    """An hourly figure below ``floor`` as a warning quotes it: rounded to cents it may read as the
    floor itself (7.995 is 8.00), which a warning then says is "just under" it."""
    return f"{pay}" if pay < floor else f"just under {floor}"


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
    seconds_per_question: float | None = None  # ``review.SECONDS_PER_QUESTION_RULE`` over the timed tasks
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


def study_timed_tasks(*, study: Study) -> QuerySet[Assignment]:
    """The tasks of ``study`` whose times the hourly pay reads (``TIMED_TASKS_RULE``): submitted or
    approved, not on hold, with a submission time, and holding at least one unit claim that is not
    released (one that counts or could once cleared, as ``claims_that_count`` reads it). Here a
    submitted or approved task's claims are never released (only expiry, return and rejection
    release them); a bundle copy's task that was on hold at the origin has them all released."""
    holds_work = Exists(Claim.objects.filter(assignment_id=OuterRef("pk"), unit__isnull=False, released=False))
    return Assignment.objects.filter(holds_work, study=study, status__in=COUNTING_ASSIGNMENT_STATUSES,
                                     submitted_at__isnull=False).filter(~on_hold("pk"))


def task_minutes(*, tasks: QuerySet[Assignment]) -> dict[int, float]:
    """Each submitted task of ``tasks`` by id: its recorded minutes (``TASK_TIME_RULE``), from the
    start of its clock (``created_at``: ``deadlines.task_clock_start``) to ``submitted_at``, never
    below 0. The one owner of a task's time for pay: the hourly pay and every page quoting it read it."""
    rows = tasks.filter(submitted_at__isnull=False).values_list("id", "created_at", "submitted_at")
    return {pk: max(0.0, (submitted - started).total_seconds() / 60) for pk, started, submitted in rows}


def study_effective_hourly_pay(*, study: Study) -> HourlyPay:
    """Effective hourly pay from recorded task times of the tasks paid or payable
    (``study_timed_tasks``: rejected and held work left out) (``task_minutes``: from the start of
    the task's clock, a platform arrival's landing as the platform times it, to submission; the sum of
    the answer durations as "active" time where recorded), with the median and spread, against
    the study's floor, and their seconds per question (``review.SECONDS_PER_QUESTION_RULE``, one
    query). Before any such task is done, the estimate from ``estimated_minutes_per_task``."""
    reward = money(study.reward)
    floor = money(study.hourly_pay_floor)
    estimate_minutes = Decimal(platform_minutes(study=study))  # the minutes a platform shows workers
    result = HourlyPay(reward=reward, floor=floor, estimate_minutes=estimate_minutes,
                       estimate_hourly=_hourly(reward, float(estimate_minutes)))
    timed = study_timed_tasks(study=study)
    by_task = task_minutes(tasks=timed)
    minutes = list(by_task.values())
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
            Annotation.objects.filter(claim__assignment__in=list(by_task), duration_ms__isnull=False)
            .values("claim__assignment")
            .annotate(total=Sum("duration_ms"))
            .values_list("total", flat=True)
        )
        active_minutes = [total / 60000 for total in active if total]
        if active_minutes:
            result.active_median_minutes = round(statistics.median(active_minutes), 2)
        result.seconds_per_question = tasks_seconds_per_question(tasks=timed)
        pay = result.hourly_median
        if pays_below_floor(reward=reward, floor=floor, minutes=Decimal(str(result.median_minutes))):
            result.below_floor = True
            result.warnings.append(
                f"Median recorded time {result.median_minutes} min gives {_below(pay, floor)}/hour, below the floor of "
                f"{floor}/hour: raise the reward to at least "
                f"{reward_for_floor(floor=floor, minutes=Decimal(str(result.median_minutes)))} "
                "or pay the difference as a bonus."
            )
        elif pays_below_floor(reward=reward, floor=floor, minutes=Decimal(str(result.p75_minutes))):
            result.warnings.append(
                f"A quarter of workers took {result.p75_minutes} min or more, which pays {_below(result.hourly_p75, floor)}/hour, "
                f"below the floor of {floor}/hour."
            )
    elif pays_below_floor(reward=reward, floor=floor, minutes=estimate_minutes):
        result.below_floor = True
        result.warnings.append(
            f"At the estimated {estimate_minutes} min a task, {reward} pays {_below(result.estimate_hourly, floor)}/hour, below "
            f"the floor of {floor}/hour: raise the reward to at least "
            f"{reward_for_floor(floor=floor, minutes=estimate_minutes)}."
        )
    return result




def questions_per_task(*, study: Study, largest_task: int | None = None, participant_id: int | None = None) -> int:
    """What one task asks: its units (as many as the assignment rule lets a task hold,
    ``studies.design.study_capacity``; pass ``largest_task`` when it is known) plus the attention
    checks a new task of ``participant_id`` shows, by the rule the claim follows
    (``selectors.entry.attention_checks_to_give``: a check the worker answered in an earlier task is
    not asked again). A worker not known yet (None) is asked all of the study's. One statement for
    the checks, and one more for a known worker's claims of them."""
    units = _largest_task(study) if largest_task is None else largest_task
    checks, _given = attention_checks_to_give(study=study, participant_id=participant_id)
    return units + len(checks)


# Distinct questions of a study, per process: (units, questions, when read). Reading them means a
# query over all its units (``study_collects``: 30,000 rows grouped by question for a 30,000-unit
# study), and every landing page counts a task's questions. A study that is no longer a draft has
# its units fixed at opening, so its count is kept for DESIGN_TTL seconds; a draft's (its design,
# which still changes) is always read afresh.
DESIGN_TTL = 60.0
_DESIGN_QUESTIONS: dict[tuple, tuple[int, int, float]] = {}


def _largest_task(study: Study) -> int:
    """``study_collects(study=study).largest_task``, read at most once a minute for a study that is
    not a draft."""
    if study.status == Study.Status.DRAFT or study.pk is None:
        return study_capacity(study=study).largest_task
    key = (study.pk, study.created_at, study.kind)  # a row made again under the same id is another study
    now = time.monotonic()
    cached = _DESIGN_QUESTIONS.get(key)
    if cached is None or now - cached[2] > DESIGN_TTL:
        capacity = study_collects(study=study)
        if len(_DESIGN_QUESTIONS) > 10_000:
            _DESIGN_QUESTIONS.clear()
        cached = _DESIGN_QUESTIONS[key] = (capacity.units, capacity.questions, now)
    units, questions, _read_at = cached
    return min(study.units_per_task, questions) if units else 0


def pay_reading(*, hourly: HourlyPay) -> PayReading:
    """Quote the effective hourly pay honestly: the recorded median of the tasks paid or payable
    (``TIMED_TASKS_RULE``: rejected and held work left out; ``TASK_TIME_RULE``) only once at least ``MIN_TIMED_TASKS``
    of them were timed and their questions were answered at a pace a person can work at; the
    estimate otherwise, saying why. The pace is the one "seconds a question" of the review pages and
    of scoring's speeder check (``review.SECONDS_PER_QUESTION_RULE``, at least
    ``MIN_PLAUSIBLE_SECONDS_PER_QUESTION``), not the task's minutes divided by its questions (they
    include reading the instructions); with no question's steps timed no pace can be judged, so the
    recorded median is never quoted then (the estimate is, saying why). ``hourly`` is the
    cost-and-pay selector's reading."""
    n = hourly.n_recorded
    median = hourly.median_minutes
    per_question = hourly.seconds_per_question
    pace = (f"{per_question} s a question (median of the questions' recorded step times)"
            if per_question is not None else "no question's steps timed")
    warnings: list[str] = []
    estimate = (f"the estimate of {hourly.estimate_minutes} min a task gives {hourly.estimate_hourly}/h")
    if n == 0:
        figure, basis = hourly.estimate_hourly, "estimate"
        text = f"No task timed yet among the {TIMED_TASKS_RULE}: {estimate}."
    elif n < MIN_TIMED_TASKS:
        figure, basis = hourly.estimate_hourly, "estimate"
        text = (f"Only {n} paid or payable task{'s' if n != 1 else ''} timed (median {median} min), too few to "
                f"quote; {estimate} until {MIN_TIMED_TASKS} are.")
    elif per_question is None:
        # No pace to judge: the recorded median could be bots' 0.0 min as well as people's, so it is
        # not quoted (nor a reward suggested from it).
        figure, basis = hourly.estimate_hourly, "estimate"
        text = (f"Median of {n} paid or payable tasks: {median} min a task, but no question's steps were timed, "
                f"so the pace cannot be judged and the timings are not quoted; {estimate}.")
    elif per_question < MIN_PLAUSIBLE_SECONDS_PER_QUESTION:
        figure, basis = hourly.estimate_hourly, "estimate"
        text = (f"Median of {n} paid or payable tasks: {median} min a task, {pace}: faster than a person "
                f"reads, so the timings are not quoted; {estimate}.")
        warnings.append(
            f"Questions are being answered in a median of {per_question} s each: automated or careless work? "
            f"Check the workers' answers and attention checks before approving.")
    else:
        figure, basis = hourly.hourly_median, "recorded"
        text = f"Median of {n} paid or payable tasks: {median} min a task ({TASK_TIME_RULE}); {pace}."
    minutes = Decimal(str(median)) if basis == "recorded" else hourly.estimate_minutes
    below = figure is not None and pays_below_floor(reward=hourly.reward, floor=hourly.floor, minutes=minutes)
    if below:
        warnings.append(f"Effective pay {_below(figure, hourly.floor)}/h is below the floor of {hourly.floor}/h: raise the reward to at "
                        f"least {reward_for_floor(floor=hourly.floor, minutes=minutes)} or pay the difference as a bonus.")
    elif basis == "recorded":
        warnings.extend(w for w in hourly.warnings if "quarter" in w)  # the spread's warning still applies
    return PayReading(figure=figure, basis=basis, text=text, timed_tasks=n, median_minutes=median,
                      seconds_per_question=per_question, floor=hourly.floor, below_floor=below, warnings=warnings)


@dataclass
class CostAndPay:
    """What ``study`` costs on ``platform`` and what it pays an hour: the numbers every page quotes."""

    study_id: int
    platform: str
    answers: int
    largest_task: int  # units a task holds under the assignment rule (at most units_per_task)
    assignments_per_hit: int
    estimate: CostEstimate
    hourly: HourlyPay
    pay: PayReading
    warnings: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return self.estimate.n_tasks

    def as_dict(self) -> dict[str, Any]:
        pay = asdict(self.pay)
        pay["figure"] = None if self.pay.figure is None else str(self.pay.figure)
        pay["floor"] = str(self.pay.floor)
        return {
            "study": self.study_id, "platform": self.platform, "answers": self.answers, "tasks": self.tasks,
            "largest_task": self.largest_task, "assignments_per_hit": self.assignments_per_hit, **self.estimate.as_dict(),
            "hourly_pay": pay, "recorded": self.hourly.as_dict(), "warnings": list(self.warnings),
        }


def study_cost_and_pay(*, study: Study, platform_name: str | None = None,
                       max_assignments_per_hit: int | None = None, n_tasks: int | None = None) -> CostAndPay:
    """The one cost-and-pay reading: tasks under the assignment rule (or ``n_tasks``), the
    platform's estimate with its fee (MTurk HITs of ``max_assignments_per_hit``, by default
    ``RL_MTURK_MAX_ASSIGNMENTS_PER_HIT``), and the hourly pay to quote, with every warning."""
    name = platform_name if platform_name in Platform.values else study.platform
    capacity = study_collects(study=study)
    answers, default_tasks = capacity.answers, capacity.tasks
    per_hit = int(max_assignments_per_hit or settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT)
    estimate = get_platform(name).estimate_cost(
        spec_reward=study.reward, n_tasks=default_tasks if n_tasks is None else int(n_tasks),
        max_assignments_per_hit=per_hit)
    hourly = study_effective_hourly_pay(study=study)
    pay = pay_reading(hourly=hourly)
    # A design whose tasks cannot be as large as entered says so wherever its cost is quoted.
    warnings = [w for w in (capacity.warning,) if w] + list(pay.warnings)
    if name == Platform.MTURK and per_hit >= int(settings.RL_MTURK_LARGE_HIT_ASSIGNMENTS):
        warnings.append(f"MTurk charges {estimate.fee_rate:.0%} on HITs of {settings.RL_MTURK_LARGE_HIT_ASSIGNMENTS} "
                        "or more assignments: keep HITs below that to pay the lower fee.")
    return CostAndPay(study_id=study.pk, platform=name, answers=answers, largest_task=capacity.largest_task,
                      assignments_per_hit=per_hit, estimate=estimate, hourly=hourly, pay=pay, warnings=warnings)
