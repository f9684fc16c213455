"""Opening a study to workers: the one way a study becomes open (the admin's action, publishing
on a platform and the demo all call ``study_open``)."""
from __future__ import annotations

from django.db import transaction

from annotations.services.deadlines import task_minutes_at_opening
from annotations.services.platforms.access import CHANGE, access_study
from annotations.services.units import study_units_build
from studies.design import design_units
from studies.models import Study
from studies.services.studies import StudyError, study_items_draw

OPEN = CHANGE  # opening a study fixes its design and builds its units: change rights on it, as closing needs


def study_open(*, study: Study, user) -> Study:
    """Open a draft study to workers, for ``user``, who needs CHANGE access to it
    (``access.access_study``: ``OPERATOR`` for a command, None refused): draw its item sample if
    none is drawn, build its units through the one unit derivation (``studies.design``), and move
    it to open through ``Study.STATUS``, with its tasks' durations fixed from the deadline rule as
    it reads now (``deadlines.task_minutes_at_opening``: ``RL_ASSIGNMENT_MINUTES`` and
    ``RL_FIRST_ANSWER_MINUTES``, or their rules), which its tasks and every publish of it keep
    whatever the settings become. Refuses, with ``StudyError`` naming what to change, a study without a
    consent text and a design that cannot fill because it yields no units (no items, no
    sources, no rationales, no generalization questions). A design whose tasks cannot be as large
    as ``units_per_task`` (no worker sees a question twice) opens with smaller tasks: the design
    summary warns and counts the tasks and workers it needs (``studies.design.design_capacity``).
    Idempotent: an open study is returned as it is; a closed one cannot open again. Returns
    ``study``, refreshed."""
    access_study(user=user, study=study, access=OPEN)
    with transaction.atomic():
        locked = Study.objects.select_for_update().get(pk=study.pk)
        if locked.status == Study.Status.CLOSED:
            raise StudyError(f"study {locked.name!r} is closed; copy it to run it again (Copy this study, on the "
                             "study page)")
        if locked.status == Study.Status.DRAFT:
            if not locked.consent_text.strip():
                raise StudyError(
                    f"study {locked.name!r} has no consent text: write what workers agree to (the study page's "
                    "'What workers read') before opening it"
                )
            if not locked.items.exists():
                study_items_draw(study=locked)  # the right was checked above
            plan = design_units(study=locked)
            if not plan.units:
                raise StudyError(plan.problem)
            study_units_build(study=locked, plan=plan)
            # What its workers are promised, as the rule reads now, fixed with the move to open.
            Study.STATUS.move(locked, Study.Status.OPEN, **task_minutes_at_opening(locked))
    # The caller's instance is open now too, with the durations its tasks keep.
    study.refresh_from_db(fields=["status", "updated_at", "assignment_minutes", "first_answer_minutes"])
    return study
