"""A generalization study that stopped units early and closed itself, then lost a deciding answer to
a rejection: as for a utility study (test_early_stopping_reopened_unit), results.json's early_stopping
block counts the reopened unit among the units neither decided nor full, counted the same way (the
generalization's short units, ``pipeline.short_units``), and its note claims the full design's
accuracy only for the units decided early."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from annotations.models import Assignment, Unit
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.platforms.publish import study_publish
from annotations.services.release import assignment_release
from scoring.reports.sections import report_sections
from scoring.services import study_score
from scoring.services.score import EARLY_STOPPING_KEPT, EARLY_STOPPING_UNCHANGED
from studies.models import Study
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db

GEN = Study.Kind.GENERALIZATION
FULL_CLAIM = f"so {EARLY_STOPPING_UNCHANGED[GEN]} is what its 5 answers would have given"
KEPT_CLAIM = f"every unit decided early has {EARLY_STOPPING_KEPT[GEN]} its 5 answers would have given"


def gold_task(study):
    task = assignment_start(study=study, participant=ParticipantFactory())
    for claim in task.claims.select_related("unit__generalization_question"):
        for step in ("before", "after"):
            annotation_submit(assignment=task, claim=claim, step=step,
                              answer=claim.unit.generalization_question.answer)
    assignment_submit(assignment=task)
    return task


def closed_after_deciding(django_capture_on_commit_callbacks):
    owner = get_user_model().objects.create_superuser("owner", "owner@example.org", "pw")
    study = make_study(kind=GEN, n_items=1, n_sources=1, n_genq=1, quota=5, units_per_task=1,
                       stop_when_decided=True, owner=owner)
    study_publish(study=study, user=owner, platform_name="link")
    tasks = []
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):  # close_decided_study runs on commit
            tasks.append(gold_task(study))
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    assert Unit.objects.get(study=study).decided_at is not None
    return study, tasks


def test_a_generalization_unit_reopened_after_the_study_closed_is_counted_and_the_note_qualified(
        django_capture_on_commit_callbacks):
    study, tasks = closed_after_deciding(django_capture_on_commit_callbacks)
    assignment_release(assignment=tasks[0], status=Assignment.Status.REJECTED, reviewed_at=timezone.now())
    unit = Unit.objects.get(study=study)
    assert (unit.decided_at, unit.quota, unit.n_completed) == (None, 5, 2)

    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    early = run.results["early_stopping"]
    assert early["units_neither_decided_nor_full"] == 1
    assert early["units_neither_decided_nor_full_by_source"] == {unit.source.name: 1}
    assert early["units_decided"] == 0
    assert FULL_CLAIM not in early["note"], early["note"]
    assert KEPT_CLAIM in early["note"], early["note"]
    assert "1 unit is neither decided nor full" in early["note"] and "scored on the answers it has" in early["note"]
    # a generalization study publishes no short_units of its own (its utility shares are no figure of it)
    assert "short_units" not in run.results
    notes = {s.key: s for s in report_sections(run)}["early_stopping"].notes
    assert early["note"] in notes and not any(FULL_CLAIM in n for n in notes)


def test_a_generalization_study_whose_units_were_all_decided_keeps_the_full_claim(django_capture_on_commit_callbacks):
    study, _tasks = closed_after_deciding(django_capture_on_commit_callbacks)
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    early = run.results["early_stopping"]
    assert early["units_decided"] == 1
    assert early["units_neither_decided_nor_full"] == 0
    assert FULL_CLAIM in early["note"] and "neither decided nor full" not in early["note"]
