"""study_units_build: one unit per item x source (or generalization question), idempotent."""
from __future__ import annotations

import pytest

from annotations.models import Unit
from annotations.services.errors import UnitsBuildError
from annotations.services.units import study_units_build
from studies.models import GeneralizationQuestion, RationaleSource, Study
from studies.services.questions import generalization_questions_set_validation
from studies.services.studies import study_update
from tests.annotations.factories import make_study
from tests.factories import ItemFactory, RationaleSourceFactory, StudyFactory

pytestmark = pytest.mark.django_db


def test_utility_units_are_item_x_source_and_build_is_idempotent():
    study = make_study(n_items=3, n_sources=2, quota=4, status=Study.Status.DRAFT)
    assert study_units_build(study=study) == 6
    assert study_units_build(study=study) == 0
    units = Unit.objects.filter(study=study)
    assert units.count() == 6
    assert {u.quota for u in units} == {4}
    assert all(u.rationale_id and u.question_key == f"item:{u.item_id}" for u in units)


def test_generalization_units_skip_invalid_questions_and_key_on_the_original_item():
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_sources=2, n_genq=2, status=Study.Status.DRAFT)
    first = GeneralizationQuestion.objects.order_by("id").first()
    generalization_questions_set_validation(questions=[first], status=GeneralizationQuestion.Validation.INVALID)
    assert study_units_build(study=study) == (4 - 1) * 2
    for unit in Unit.objects.filter(study=study):
        assert unit.generalization_question.item_id == unit.item_id
        assert unit.question_key == f"item:{unit.item_id}"
        assert unit.rationale.item_id == unit.item_id


def test_validation_units_are_one_per_generalization_question():
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=3, status=Study.Status.DRAFT)
    assert study_units_build(study=study) == 6
    assert {u.question_key for u in Unit.objects.filter(study=study)} == {
        f"genq:{pk}" for pk in GeneralizationQuestion.objects.values_list("pk", flat=True)
    }
    assert not Unit.objects.filter(study=study, source__isnull=False).exists()


def test_properties_units_are_one_per_rationale():
    study = make_study(kind=Study.Kind.RATIONALE_PROPERTIES, n_items=2, n_sources=3, status=Study.Status.DRAFT)
    assert study_units_build(study=study) == 6


def test_gold_source_without_rationale_rows_uses_the_items_gold_rationale():
    study = make_study(n_items=2, n_sources=1, status=Study.Status.DRAFT)
    gold = RationaleSourceFactory(name="gold", kind=RationaleSource.Kind.GOLD)
    study_update(study=study, user=None, sources=[*study.sources.all(), gold])
    assert study_units_build(study=study) == 4
    assert Unit.objects.filter(study=study, source=gold, rationale__isnull=True).count() == 2


def test_quota_follows_the_study_when_rebuilt():
    # Only a draft's workers per unit can change (issue 22 item 1): its units are built when it opens.
    study = make_study(n_items=2, n_sources=1, quota=5, status=Study.Status.DRAFT)
    study_update(study=study, user=None, annotators_per_unit=3)
    study_units_build(study=study)
    assert set(Unit.objects.filter(study=study).values_list("quota", flat=True)) == {3}


def test_study_without_items_or_sources_gets_an_actionable_error():
    empty = StudyFactory()  # a bare row: study_create refuses a study without items or sources
    with pytest.raises(UnitsBuildError, match="has no items"):
        study_units_build(study=empty)
    empty.items.add(ItemFactory(dataset=empty.dataset))
    with pytest.raises(UnitsBuildError, match="no rationale sources"):
        study_units_build(study=empty)
