"""Building the units of work of a study, from the one derivation of what a design yields
(``studies.design.design_units``: which units each study kind has, and their question keys)."""
from __future__ import annotations

from django.db import transaction

from annotations.models import Unit
from annotations.services.errors import UnitsBuildError
from studies.design import UnitPlan, design_units
from studies.models import Study


@transaction.atomic
def study_units_build(*, study: Study, plan: UnitPlan | None = None) -> int:
    """Create the missing units of ``study`` (from ``plan``, by default ``design_units``) and
    return how many were created. Raises ``UnitsBuildError`` when the design yields none.

    Idempotent: a second call creates nothing and returns 0. Existing units take the study's
    current ``annotators_per_unit`` as quota unless they already hold more claims than that."""
    plan = plan if plan is not None else design_units(study=study)
    if not plan.units:
        raise UnitsBuildError(plan.problem)
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
            generalization_question_id=spec.generalization_question_id,
            question_key=spec.question_key,
            quota=quota,
        )
        for spec in plan.units
        if (spec.item_id, spec.source_id, spec.generalization_question_id) not in existing
    ]
    Unit.objects.bulk_create(new_units, batch_size=1000)
    Unit.objects.filter(study=study, n_claimed__lte=quota).exclude(quota=quota).update(quota=quota)
    return len(new_units)
