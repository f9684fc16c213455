"""What a study design yields: its units of work (the one derivation) and what filling them takes.

A unit is one thing that needs ``study.annotators_per_unit`` distinct workers. What a unit is
depends on the study kind:

=====================  ===============================================  ===================
kind                   one unit per                                     question_key
=====================  ===============================================  ===================
utility                item x source (with that source's rationale)     ``item:<item id>``
generalization         generalization question x source (rationale of   ``item:<item id>``
                       the *original* item from that source)
question_validation    generalization question                          ``genq:<genq id>``
rationale_properties   rationale (item x source)                        ``item:<item id>``
=====================  ===============================================  ===================

``question_key`` is what a worker must never see twice in a study. In a generalization study
the worker sees the original question and its rationale after answering x_g, so any other
generalization question of the same item would be contaminated: the key is the original item,
not the generalization question. Generalization questions marked invalid are left out.

A gold source without a ``Rationale`` row falls back to ``Item.gold_rationale`` (shown at the
reveal); other missing (item, source) rationales are skipped and counted.

A rationale properties study asks the worker whether each rationale supports its predicted answer
(and about contrast and leakage), so a rationale must come with one (an import may leave
``Rationale.predicted_answer`` blank; a gold source's fallback text is the gold answer's). While
any rationale the design would show has none, the design yields no units: the plan counts them by
source (``unpredicted_rationales``) and its problem names them, so the study cannot open with them
and the design summary shows why.

``design_units`` is read by the unit builder (``annotations``: it creates ``Unit`` rows from it,
in this order) and by the design summary; ``design_capacity`` applies the assignment rule (a
worker gets at most one unit of each question, so a task holds at most one unit per distinct
question) to say how large a task can be and how many tasks and workers the quota needs.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from studies.models import GeneralizationQuestion, Item, Rationale, RationaleSource, Study


@dataclass(frozen=True)
class UnitSpec:
    item_id: int
    source_id: int | None
    rationale_id: int | None
    generalization_question_id: int | None
    question_key: str


@dataclass
class UnitPlan:
    """The units a design yields, in build order. ``problem`` says why there are none."""

    units: list[UnitSpec] = field(default_factory=list)
    missing_rationales: int = 0
    # A rationale properties study's rationales without a predicted answer, by source name.
    unpredicted_rationales: dict[str, int] = field(default_factory=dict)
    problem: str = ""


def design_units(*, study: Study, item_ids: Iterable[int] | None = None) -> UnitPlan:
    """Every unit ``study`` yields (see the table above), from its drawn items, or from
    ``item_ids`` (the summary of a study whose sample is not drawn yet)."""
    if item_ids is None:
        item_ids = study.items.order_by("id").values_list("id", flat=True) if study.pk else []
    item_ids = sorted(item_ids)
    if not item_ids:
        return UnitPlan(problem=f"Study '{study.name}' has no items: add items to the study (or draw its sample).")
    if study.kind == Study.Kind.QUESTION_VALIDATION:
        return _question_validation_units(study=study, item_ids=item_ids)
    sources = list(study.sources.order_by("id")) if study.pk else []
    if not sources:
        return UnitPlan(problem=f"Study '{study.name}' has no rationale sources: add at least one source to the study.")
    rationales = _rationales_of(item_ids=item_ids, sources=sources)
    questions = _source_questions(study=study, item_ids=item_ids)
    if isinstance(questions, UnitPlan):
        return questions
    return _source_units(study=study, questions=questions, sources=sources, rationales=rationales)


def _question_validation_units(*, study: Study, item_ids: list[int]) -> UnitPlan:
    """A question validation study: one unit per generalization question of its items."""
    units = [
        UnitSpec(item_id, None, None, genq_id, f"genq:{genq_id}")
        for genq_id, item_id in GeneralizationQuestion.objects.filter(item_id__in=item_ids)
        .order_by("item_id", "id").values_list("id", "item_id")
    ]
    if not units:
        return UnitPlan(problem=(
            f"Study '{study.name}' validates generalization questions, but its items have none: "
            "import or generate generalization questions first."
        ))
    return UnitPlan(units=units)


@dataclass(frozen=True)
class _Rationales:
    """Which (item, source) pairs can be shown: a stored rationale, or a gold source's fallback
    to ``Item.gold_rationale``."""

    rationale_of: dict[tuple[int, int], int]
    gold_sources: set[int]
    has_gold_text: set[int]
    # The stored rationales whose predicted answer is blank.
    unpredicted: frozenset[int] = frozenset()

    def shown(self, item_id: int, source_id: int) -> tuple[bool, int | None]:
        """Whether the pair has something to show, and its rationale id (None: the gold text)."""
        rationale_id = self.rationale_of.get((item_id, source_id))
        if rationale_id is None and not (source_id in self.gold_sources and item_id in self.has_gold_text):
            return False, None
        return True, rationale_id


def _rationales_of(*, item_ids: list[int], sources: list[RationaleSource]) -> _Rationales:
    rows = Rationale.objects.filter(item_id__in=item_ids, source__in=sources).values_list(
        "id", "item_id", "source_id", "predicted_answer"
    )
    rationale_of, unpredicted = {}, set()
    for rationale_id, item_id, source_id, predicted in rows:
        rationale_of[(item_id, source_id)] = rationale_id
        if not predicted.strip():
            unpredicted.add(rationale_id)
    gold_sources = {s.pk for s in sources if s.kind == RationaleSource.Kind.GOLD}
    has_gold_text = set()
    if gold_sources:
        has_gold_text = set(Item.objects.filter(id__in=item_ids).exclude(gold_rationale="").values_list("id", flat=True))
    return _Rationales(rationale_of, gold_sources, has_gold_text, frozenset(unpredicted))


def _source_questions(*, study: Study, item_ids: list[int]) -> list[tuple[int, int | None]] | UnitPlan:
    """The (item, generalization question or None) pairs of a study whose units pair each with
    every source that has a rationale for the item; a ``UnitPlan`` with the problem when none."""
    kind = study.kind
    if kind in (Study.Kind.UTILITY, Study.Kind.RATIONALE_PROPERTIES):
        return [(item_id, None) for item_id in item_ids]
    if kind == Study.Kind.GENERALIZATION:
        questions = [
            (item_id, genq_id)
            for genq_id, item_id in GeneralizationQuestion.objects.filter(item_id__in=item_ids)
            .exclude(validation_status=GeneralizationQuestion.Validation.INVALID)
            .order_by("item_id", "id").values_list("id", "item_id")
        ]
        if not questions:
            return UnitPlan(problem=f"Study '{study.name}': its items have no generalization questions yet.")
        return questions
    return UnitPlan(problem=f"Study kind '{kind}' has no unit definition.")  # pragma: no cover - add a new kind here


def _source_units(*, study: Study, questions: list[tuple[int, int | None]], sources: list[RationaleSource],
                  rationales: _Rationales) -> UnitPlan:
    """Each question paired with every source that has something to show for its item; none for
    a rationale properties study while a rationale it would show has no predicted answer."""
    plan = UnitPlan()
    unpredicted: Counter[str] = Counter()
    judges_prediction = study.kind == Study.Kind.RATIONALE_PROPERTIES
    for item_id, genq_id in questions:
        for source in sources:
            shown, rationale_id = rationales.shown(item_id, source.pk)
            if not shown:
                plan.missing_rationales += 1
                continue
            if judges_prediction and rationale_id in rationales.unpredicted:
                unpredicted[source.name] += 1
            plan.units.append(UnitSpec(item_id, source.pk, rationale_id, genq_id, f"item:{item_id}"))
    if unpredicted:
        plan.unpredicted_rationales = {s.name: unpredicted[s.name] for s in sources if unpredicted[s.name]}
        plan.units = []
        named = ", ".join(f"{n} from source '{name}'" for name, n in plan.unpredicted_rationales.items())
        plan.problem = (
            f"Study '{study.name}' asks whether each rationale supports its predicted answer, but "
            f"{sum(unpredicted.values())} of its rationales have no predicted answer ({named}): import them "
            "again with their predicted answers, or leave that source out of the study."
        )
    elif not plan.units:
        plan.problem = (
            f"Study '{study.name}' yields no units: none of its items has a rationale from its sources "
            f"({plan.missing_rationales} item/source pairs without a rationale)."
        )
    return plan


@dataclass(frozen=True)
class Capacity:
    """What filling a design takes under the assignment rule (no worker sees a question twice).

    ``largest_task``: units a task can hold (``units_per_task``, or fewer when the design has
    fewer distinct questions); ``tasks``: tasks the quota needs at least (each holds at most
    ``largest_task`` units and at most one unit of each question); ``workers``: distinct workers
    it needs at least (one worker answers each question once over all their tasks);
    ``warning``: what differs from the design as entered (tasks smaller than ``units_per_task``),
    empty when nothing does."""

    units: int
    questions: int
    answers: int
    units_per_task: int
    largest_task: int
    tasks: int
    workers: int
    warning: str = ""


def tasks_for_places(*, places: Mapping[str, int], units_per_task: int) -> int:
    """Tasks that ``places`` (answers still wanted, per question key) need at least under the
    assignment rule: a task holds at most ``units_per_task`` units and at most one unit of each
    question, so a question with n places needs n tasks."""
    wanted = [n for n in places.values() if n > 0]
    if not wanted:
        return 0
    largest = min(units_per_task, len(wanted))
    return max(math.ceil(sum(wanted) / largest), max(wanted))


def design_capacity(*, question_keys: Iterable[str], quota: int, units_per_task: int) -> Capacity:
    """The assignment rule applied to a design's units (their ``question_key``s)."""
    per_question = Counter(question_keys)
    units = sum(per_question.values())
    answers = units * quota
    if not units:
        return Capacity(0, 0, 0, units_per_task, 0, 0, 0)
    questions = len(per_question)
    largest = min(units_per_task, questions)
    # A question with s units needs s x quota different workers, and as many tasks.
    busiest = max(per_question.values()) * quota
    tasks = tasks_for_places(places={key: n * quota for key, n in per_question.items()},
                             units_per_task=units_per_task)
    workers = max(math.ceil(answers / questions), busiest)
    warning = ""
    if largest < units_per_task:
        warning = (
            f"Tasks can hold at most {largest} questions, not {units_per_task}: a worker never sees a question "
            f"twice (whatever the source), and this design has {questions} distinct questions. Filling "
            f"{units:,} units x {quota} workers = {answers:,} answers takes {tasks:,} tasks and at least "
            f"{workers:,} different workers. Publish that many tasks, or set units per task to {largest} or "
            "fewer, or add items."
        )
    return Capacity(units, questions, answers, units_per_task, largest, tasks, workers, warning)


def study_capacity(*, study: Study, plan: UnitPlan | None = None) -> Capacity:
    """``design_capacity`` of the study's own design (its units per task and workers per unit)."""
    plan = plan if plan is not None else design_units(study=study)
    return design_capacity(question_keys=[u.question_key for u in plan.units], quota=study.annotators_per_unit,
                           units_per_task=study.units_per_task)


def sample_drawn(pool: list, *, size: int | None, seed: int) -> list:
    """A study's sample of ``pool`` (its split's items, in external-id order, as objects or ids):
    all of it when ``size`` is None or at least the pool's size, else ``size`` of them drawn with
    ``seed``, in the pool's order. The one rule of the draw (``services.studies.study_items_draw``)
    and of the design summary's preview before one (``selectors.study_design_summary``), so the
    preview counts the items the study will get."""
    if size is None or size >= len(pool):
        return list(pool)
    # The positions ``random.Random(seed).sample(pool, size)`` draws (the same calls, whatever the
    # pool holds), kept in the pool's order.
    return [pool[n] for n in sorted(random.Random(seed).sample(range(len(pool)), size))]
