"""Opening a study (the one ``study_open``) and what a design can deliver (issue 11: "24 units,
120 answers, 12 tasks of 10" for 8 items x 3 sources x 5 workers, when no task could hold more
than 8 questions and 12 tasks left every unit at 4 of 5 answers)."""
from __future__ import annotations

import pytest

from annotations.models import Unit
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.design import design_capacity, study_capacity
from studies.models import Study
from studies.selectors import study_design_summary
from studies.services.studies import StudyError, study_update
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db


def fill(study) -> list[int]:
    """New workers take one task each and finish it until there is no work; the task sizes."""
    sizes = []
    while True:
        try:
            assignment = assignment_start(study=study, participant=ParticipantFactory())
        except NoWorkAvailable:
            return sizes
        claims = list(assignment.claims.select_related("unit__item").order_by("position"))
        for claim in claims:
            annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
            annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
        assignment_submit(assignment=assignment)
        sizes.append(len(claims))


def test_capacity_of_the_issue_example():
    keys = [f"item:{i}" for i in range(8) for _source in range(3)]
    capacity = design_capacity(question_keys=keys, quota=5, units_per_task=10)
    assert (capacity.units, capacity.questions, capacity.answers) == (24, 8, 120)
    assert (capacity.largest_task, capacity.tasks, capacity.workers) == (8, 15, 15)
    assert "at most 8 questions, not 10" in capacity.warning and "15 tasks" in capacity.warning
    fits = design_capacity(question_keys=keys, quota=5, units_per_task=8)
    assert (fits.largest_task, fits.tasks, fits.workers, fits.warning) == (8, 15, 15, "")


def test_summary_follows_the_assignment_rule_and_the_real_rule_agrees():
    study = make_study(status=Study.Status.DRAFT, n_items=8, n_sources=3, quota=5, units_per_task=10)
    summary = study_design_summary(study=study)
    assert (summary.units, summary.answers, summary.tasks) == (24, 120, 15)  # was 12 tasks of 10
    assert (summary.largest_task, summary.workers, summary.questions) == (8, 15, 8)
    assert any("at most 8 questions, not 10" in w for w in summary.warnings)
    study = study_open(study=study, user=OPERATOR)
    sizes = fill(study)
    assert sizes == [8] * 15
    assert set(Unit.objects.filter(study=study).values_list("n_completed", flat=True)) == {5}


def test_uneven_generalization_design_needs_as_many_tasks_as_its_busiest_question():
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_sources=1, n_genq=3, quota=2,
                       units_per_task=2)
    capacity = study_capacity(study=study)
    assert (capacity.units, capacity.questions, capacity.largest_task) == (6, 2, 2)
    assert capacity.tasks == capacity.workers == 6  # each item's 3 units x 2 workers, one per worker
    assert len(fill(study)) == capacity.tasks


def test_open_builds_units_through_the_derivation_and_the_status_machine():
    study = make_study(status=Study.Status.DRAFT, n_items=3, n_sources=2)
    assert not Unit.objects.filter(study=study).exists()
    opened = study_open(study=study, user=OPERATOR)
    assert opened.status == Study.Status.OPEN
    assert Unit.objects.filter(study=study).count() == 6
    assert study_open(study=opened, user=OPERATOR).status == Study.Status.OPEN  # idempotent
    assert Unit.objects.filter(study=study).count() == 6


def test_open_refuses_an_empty_consent_text():
    study = make_study(status=Study.Status.DRAFT, consent_text="   ")
    with pytest.raises(StudyError, match="no consent text"):
        study_open(study=study, user=OPERATOR)
    assert Study.objects.get(pk=study.pk).status == Study.Status.DRAFT
    assert any("no consent text" in w for w in study_design_summary(study=study).warnings)
    study_update(study=study, user=None, consent_text="I agree.")
    assert study_open(study=study, user=OPERATOR).status == Study.Status.OPEN


def test_open_refuses_a_design_that_yields_no_units():
    study = make_study(status=Study.Status.DRAFT, kind=Study.Kind.GENERALIZATION, n_genq=0)
    with pytest.raises(StudyError, match="no generalization questions"):
        study_open(study=study, user=OPERATOR)
    assert Study.objects.get(pk=study.pk).status == Study.Status.DRAFT
    assert not Unit.objects.filter(study=study).exists()


def test_a_closed_study_does_not_open_again():
    study = make_study(status=Study.Status.CLOSED)
    with pytest.raises(StudyError, match="closed"):
        study_open(study=study, user=OPERATOR)
