"""Writes of study designs: create a study, update its design, draw its item sample."""
from __future__ import annotations

import random
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from studies.models import Dataset, Item, Platform, RationaleSource, Study


class StudyError(Exception):
    """A study design cannot be made or changed as asked; the message says why and what to do."""


def _validation_message(exc: ValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
    return " ".join(exc.messages)


def _full_clean(study: Study) -> None:
    """``study.full_clean()``, its errors raised as one StudyError that names each field."""
    try:
        study.full_clean()
    except ValidationError as exc:
        raise StudyError(_validation_message(exc)) from None


def study_sample_items(*, study: Study) -> list[Item]:
    """Draw the study's items from its dataset split: all of them when ``item_sample_size`` is
    empty, else a sample drawn with ``random.Random(sample_seed)`` from the items ordered by
    external id, so the same seed gives the same sample on any database. Only a draft study can
    be re-sampled. Returns the items, ordered by external id."""
    if study.status != Study.Status.DRAFT:
        raise StudyError(f"study {study.name!r} is {study.get_status_display().lower()}: only a draft can be re-sampled")
    with transaction.atomic():
        pool = list(Item.objects.filter(dataset=study.dataset, split=study.split).order_by("external_id"))
        if not pool:
            raise StudyError(
                f"dataset {study.dataset.name!r} has no items in split {study.split!r}: import the questions first"
            )
        size = study.item_sample_size
        if size is None or size == len(pool):
            chosen = pool
        elif size > len(pool):
            raise StudyError(
                f"the sample size {size} is larger than the {len(pool)} items of split {study.split!r}; "
                "lower it or leave it empty to take all"
            )
        else:
            chosen = sorted(random.Random(study.sample_seed).sample(pool, size), key=lambda i: i.external_id)
        study.items.set(chosen)
        return chosen


def _check_sources(*, dataset: Dataset, sources: Iterable[RationaleSource]) -> list[RationaleSource]:
    sources = list(sources)
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise StudyError("a rationale source is listed twice")
    return sources


SAMPLE_FIELDS = {"dataset", "split", "item_sample_size", "sample_seed"}
DESIGN_FIELDS = {
    "name", "kind", "dataset", "split", "item_sample_size", "sample_seed", "annotators_per_unit", "units_per_task",
    "reward", "hourly_pay_floor", "estimated_minutes_per_task", "platform", "consent_text", "instructions",
    "example", "faithfulness_enabled", "owner", "stop_when_decided",
}
# Kinds scored by the majority of the before and after answers: the only ones a unit can stop early in.
STOP_WHEN_DECIDED_KINDS = (Study.Kind.UTILITY, Study.Kind.GENERALIZATION)


def study_create(
    *,
    name: str,
    dataset: Dataset,
    kind: str = Study.Kind.UTILITY,
    split: str = "test",
    sources: Iterable[RationaleSource] = (),
    item_sample_size: int | None = None,
    sample_seed: int = 0,
    annotators_per_unit: int = 5,
    units_per_task: int = 10,
    reward: Decimal | str | float = Decimal("2.00"),
    hourly_pay_floor: Decimal | str | float = Decimal("15.00"),
    estimated_minutes_per_task: Decimal | str | float = Decimal("6.0"),
    platform: str = Platform.LINK,
    owner: Any = None,
    consent_text: str = "",
    instructions: str = "",
    example: str = "",
    faithfulness_enabled: bool = False,
    stop_when_decided: bool = False,
) -> Study:
    """Create a draft study design and draw its item sample. Raises StudyError with a message
    the researcher can act on (bad numbers, a name in use, an empty split, a sample too large)."""
    sources = _check_sources(dataset=dataset, sources=sources)
    if kind in (Study.Kind.UTILITY, Study.Kind.GENERALIZATION, Study.Kind.RATIONALE_PROPERTIES) and not sources:
        raise StudyError(f"a {Study.Kind(kind).label.lower()} study needs at least one rationale source")
    study = Study(
        name=name.strip(), kind=kind, dataset=dataset, split=split, item_sample_size=item_sample_size,
        sample_seed=sample_seed, annotators_per_unit=annotators_per_unit, units_per_task=units_per_task,
        reward=Decimal(str(reward)), hourly_pay_floor=Decimal(str(hourly_pay_floor)),
        estimated_minutes_per_task=Decimal(str(estimated_minutes_per_task)), platform=platform,
        owner=owner if getattr(owner, "is_authenticated", False) else None,
        consent_text=consent_text, instructions=instructions, example=example,
        faithfulness_enabled=faithfulness_enabled, stop_when_decided=stop_when_decided,
    )
    _check_stop_when_decided(study)
    _full_clean(study)
    with transaction.atomic():
        study.save()
        study.sources.set(sources)
        study_sample_items(study=study)
    return study


LOCKED_FIELDS = ("dataset", "split", "item_sample_size", "sample_seed", "annotators_per_unit", "stop_when_decided")


def _check_stop_when_decided(study: Study) -> None:
    """Stopping a unit early needs a score decided by majorities (utility, generalization)."""
    if study.stop_when_decided and study.kind not in STOP_WHEN_DECIDED_KINDS:
        raise StudyError(
            f"stop_when_decided: a {Study.Kind(study.kind).label.lower()} study is not scored by the majority of "
            "before and after answers, so no unit can be decided early; turn it off (utility and generalization "
            "studies only).")


def study_locked_changes(*, study: Study, changes: dict[str, Any],
                         sources: Iterable[RationaleSource] | None = None) -> dict[str, str]:
    """What of ``changes`` (and ``sources``) a study that is no longer a draft refuses, as
    {field: reason}: its items (sampling fields) and sources, and its workers per unit, since the
    units, their counters, the progress and the cost were built with it. Empty for a draft. The
    one owner of this rule: ``study_update`` enforces it, the study form shows it per field."""
    if study.status == Study.Status.DRAFT:
        return {}
    refused: dict[str, str] = {}
    state = study.get_status_display().lower()
    for field in LOCKED_FIELDS:
        if field in changes and changes[field] != getattr(study, field):
            if field == "stop_when_decided":
                refused[field] = (f"The study is no longer a draft ({state}): whether a unit stops when its result "
                                  "is decided cannot change (its units were filled under that rule).")
            elif field == "annotators_per_unit":
                refused[field] = (f"The study is no longer a draft ({state}): its workers per unit cannot change "
                                  f"(its units, progress and cost were built with {study.annotators_per_unit}).")
            else:
                refused[field] = f"The study is no longer a draft ({state}): its items cannot change."
    if sources is not None and set(sources) != set(study.sources.all()):
        refused["sources"] = f"The study is no longer a draft ({state}): its sources cannot change."
    return refused


def study_update(*, study: Study, sources: Iterable[RationaleSource] | None = None, **changes: Any) -> Study:
    """Change a study's design. Sampling fields (dataset, split, sample size, seed), sources and
    workers per unit change only while the study is a draft (``study_locked_changes``); a changed
    sample is drawn again."""
    unknown = set(changes) - DESIGN_FIELDS
    if unknown:
        raise StudyError(f"unknown study field(s): {', '.join(sorted(unknown))}")
    old = {f: getattr(study, f) for f in SAMPLE_FIELDS}
    resample = any(f in changes and changes[f] != old[f] for f in SAMPLE_FIELDS)
    refused = study_locked_changes(study=study, changes=changes, sources=sources)
    if refused:
        raise StudyError(f"study {study.name!r}: " + " ".join(dict.fromkeys(refused.values())))
    for field, value in changes.items():
        setattr(study, field, value)
    _check_stop_when_decided(study)
    _full_clean(study)
    with transaction.atomic():
        study.save()
        if sources is not None:
            study.sources.set(_check_sources(dataset=study.dataset, sources=sources))
        if resample or not study.items.exists():
            study_sample_items(study=study)
    return study
