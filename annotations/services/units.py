"""Building the units of work of a study.

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
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from annotations.models import Unit
from annotations.services.errors import UnitsBuildError
from studies.models import GeneralizationQuestion, Rationale, RationaleSource, Study


@dataclass(frozen=True)
class _Spec:
    item_id: int
    source_id: int | None
    rationale_id: int | None
    genq_id: int | None
    question_key: str


def _rationale_lookup(item_ids: list[int], sources: list[RationaleSource]):
    by_pair = {
        (item_id, source_id): rationale_id
        for rationale_id, item_id, source_id in Rationale.objects.filter(
            item_id__in=item_ids, source__in=sources
        ).values_list("id", "item_id", "source_id")
    }
    return by_pair


def _specs_for(study: Study) -> tuple[list[_Spec], int]:
    """Every unit the study should have, and how many (item, source) pairs had no rationale."""
    items = list(study.items.order_by("id").values_list("id", "gold_rationale"))
    if not items:
        raise UnitsBuildError(
            f"Study '{study.name}' has no items: add items to the study (or draw its sample) "
            "before building units."
        )
    item_ids = [item_id for item_id, _ in items]
    gold_text = dict(items)
    kind = study.kind
    specs: list[_Spec] = []
    missing = 0

    if kind == Study.Kind.QUESTION_VALIDATION:
        for genq_id, item_id in GeneralizationQuestion.objects.filter(item_id__in=item_ids).order_by(
            "item_id", "id"
        ).values_list("id", "item_id"):
            specs.append(_Spec(item_id, None, None, genq_id, f"genq:{genq_id}"))
        if not specs:
            raise UnitsBuildError(
                f"Study '{study.name}' validates generalization questions, but its items have none: "
                "import or generate generalization questions first."
            )
        return specs, 0

    sources = list(study.sources.order_by("id"))
    if not sources:
        raise UnitsBuildError(
            f"Study '{study.name}' has no rationale sources: add at least one source to the study."
        )
    rationale_of = _rationale_lookup(item_ids, sources)

    def rationale_for(item_id: int, source: RationaleSource) -> tuple[bool, int | None]:
        rid = rationale_of.get((item_id, source.id))
        if rid is not None:
            return True, rid
        if source.kind == RationaleSource.Kind.GOLD and gold_text.get(item_id):
            return True, None
        return False, None

    # (item, generalization question or None): each is paired with every source that has a rationale for the item.
    if kind in (Study.Kind.UTILITY, Study.Kind.RATIONALE_PROPERTIES):
        questions = [(item_id, None) for item_id in item_ids]
    elif kind == Study.Kind.GENERALIZATION:
        genqs = GeneralizationQuestion.objects.filter(item_id__in=item_ids).exclude(
            validation_status=GeneralizationQuestion.Validation.INVALID
        ).order_by("item_id", "id").values_list("id", "item_id")
        questions = [(item_id, genq_id) for genq_id, item_id in genqs]
    else:  # pragma: no cover - a new kind must be added here explicitly
        raise UnitsBuildError(f"Study kind '{kind}' has no unit definition.")
    for item_id, genq_id in questions:
        for source in sources:
            ok, rid = rationale_for(item_id, source)
            if not ok:
                missing += 1
                continue
            specs.append(_Spec(item_id, source.id, rid, genq_id, f"item:{item_id}"))
    if not specs:
        raise UnitsBuildError(
            f"Study '{study.name}' yields no units: none of its items has a rationale from its sources "
            f"({missing} item/source pairs without a rationale)."
        )
    return specs, missing


@transaction.atomic
def study_units_build(*, study: Study) -> int:
    """Create the missing units of ``study`` and return how many were created.

    Idempotent: a second call creates nothing and returns 0. Existing units take the study's
    current ``annotators_per_unit`` as quota unless they already hold more claims than that."""
    specs, _missing = _specs_for(study)
    quota = study.annotators_per_unit
    existing = set(
        Unit.objects.filter(study=study).values_list("item_id", "source_id", "generalization_question_id")
    )
    new_units = [
        Unit(
            study=study,
            item_id=spec.item_id,
            source_id=spec.source_id,
            rationale_id=spec.rationale_id,
            generalization_question_id=spec.genq_id,
            question_key=spec.question_key,
            quota=quota,
        )
        for spec in specs
        if (spec.item_id, spec.source_id, spec.genq_id) not in existing
    ]
    Unit.objects.bulk_create(new_units, batch_size=1000)
    Unit.objects.filter(study=study, n_claimed__lte=quota).exclude(quota=quota).update(quota=quota)
    return len(new_units)
