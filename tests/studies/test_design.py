"""The one derivation of a study design's units (``studies.design.design_units``): what a rationale
properties study makes of rationales imported without a predicted answer."""
from __future__ import annotations

import pytest

from annotations.models import Unit
from annotations.selectors.cost import study_collects
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.design import design_units
from studies.models import Rationale, RationaleSource, Study
from studies.selectors import study_design_summary
from studies.services.importers import rationales_import
from studies.services.studies import StudyError, study_create
from tests.annotations.factories import TEST_CONSENT
from tests.factories import DatasetFactory, ItemFactory
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db


@pytest.fixture
def imported(tmp_path):
    """Three yes/no items; source "predicts" with a predicted answer for each, source "blank"
    imported without one for two of them (the import allows a blank predicted answer)."""
    dataset = DatasetFactory(name="YN-design")
    for n in range(3):
        ItemFactory(dataset=dataset, external_id=f"i{n}", gold_answer="yes")
    rows = [{"item_id": f"i{n}", "source": "predicts", "rationale": f"Because {n}.", "predicted_answer": "yes"}
            for n in range(3)]
    rows += [{"item_id": "i0", "source": "blank", "rationale": "No prediction 0."},
             {"item_id": "i1", "source": "blank", "rationale": "No prediction 1.", "predicted_answer": ""},
             {"item_id": "i2", "source": "blank", "rationale": "Predicted 2.", "predicted_answer": "no"}]
    rationales_import(file=write_jsonl(tmp_path / "r.jsonl", rows), dataset_name="YN-design", split="test")
    return dataset


def _study(dataset, kind: str, source_names: list[str]) -> Study:
    sources = list(RationaleSource.objects.filter(name__in=source_names).order_by("name"))
    return study_create(name=f"design-{kind}-{'-'.join(source_names)}", dataset=dataset, kind=kind, split="test",
                        sources=sources, annotators_per_unit=1, units_per_task=1, consent_text=TEST_CONSENT)


def test_properties_study_with_rationales_without_a_predicted_answer_cannot_open(imported):
    study = _study(imported, Study.Kind.RATIONALE_PROPERTIES, ["blank", "predicts"])
    plan = design_units(study=study)
    assert plan.units == [] and plan.unpredicted_rationales == {"blank": 2}
    assert "2 of its rationales have no predicted answer (2 from source 'blank')" in plan.problem
    summary = study_design_summary(study=study)
    assert summary.units == 0 and plan.problem in summary.warnings
    with pytest.raises(StudyError, match="2 from source 'blank'"):
        study_open(study=study, user=OPERATOR)
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT and not Unit.objects.filter(study=study).exists()


def test_properties_study_opens_with_the_sources_that_predict(imported):
    study = study_open(study=_study(imported, Study.Kind.RATIONALE_PROPERTIES, ["predicts"]), user=OPERATOR)
    assert study.status == Study.Status.OPEN
    assert Unit.objects.filter(study=study).count() == 3


def test_a_utility_study_shows_rationales_without_a_predicted_answer(imported):
    # Only a properties study asks about the predicted answer: a utility study's worker never sees it.
    study = _study(imported, Study.Kind.UTILITY, ["blank", "predicts"])
    plan = design_units(study=study)
    assert len(plan.units) == 6 and plan.unpredicted_rationales == {} and not plan.problem


def test_an_open_properties_study_says_what_its_blank_predictions_mean_not_how_a_draft_opens(imported):
    # A study opened before a blank predicted answer kept one from opening (or a bundle's copy of
    # one): its units are built and its sources fixed, so a draft's advice cannot be followed.
    study = study_open(study=_study(imported, Study.Kind.RATIONALE_PROPERTIES, ["predicts"]), user=OPERATOR)
    Rationale.objects.filter(source__name="predicts", item__external_id__in=["i0", "i1"]).update(predicted_answer="")
    plan = design_units(study=study)
    assert plan.unpredicted_rationales == {"predicts": 2}
    summary = study_design_summary(study=study, collects=study_collects(study=study))
    assert summary.units == 3
    assert plan.problem not in summary.warnings
    assert not any("import them again" in w for w in summary.warnings)
    assert ("This study's workers are shown a blank predicted answer for 2 of its rationales "
            "(2 from source 'predicts')") in " ".join(summary.warnings)


def test_a_draft_properties_study_still_says_how_to_open(imported):
    study = _study(imported, Study.Kind.RATIONALE_PROPERTIES, ["blank"])
    summary = study_design_summary(study=study, collects=study_collects(study=study))
    assert design_units(study=study).problem in summary.warnings
    assert not any("workers are shown" in w for w in summary.warnings)


def test_a_studys_design_before_its_draw_counts_the_items_the_draw_will_give():
    """A draft whose drawn items were all deleted (its split imported again) has no sample until it is
    drawn again: the design summary previews one. Before, the preview took the first items by
    external id, where the draw is seeded and random: it counted the missing rationales of items the
    study would not get."""
    from studies.models import Item
    from studies.services.studies import study_sample_items

    dataset = DatasetFactory(name="d")
    source = RationaleSource.objects.create(name="lm", kind=RationaleSource.Kind.IMPORTED)
    first = [ItemFactory(dataset=dataset, split="test", external_id=f"old{n}") for n in range(3)]
    for item in first:
        Rationale.objects.create(item=item, source=source, text="Because.", predicted_answer="yes")
    study = study_create(name="early", dataset=dataset, split="test", item_sample_size=3, sample_seed=11,
                         sources=[source], owner=None, user=None, consent_text=TEST_CONSENT)
    Item.objects.filter(pk__in=[i.pk for i in first]).delete()  # the split imported again
    items = [ItemFactory(dataset=dataset, split="test", external_id=f"i{n:02d}") for n in range(12)]
    for item in items[:3]:  # the first three by external id have rationales, the rest none
        Rationale.objects.create(item=item, source=source, text="Because.", predicted_answer="yes")
    assert not study.items.exists()

    preview = study_design_summary(study=study)
    drawn = study_sample_items(study=study, user=None)

    assert sorted(i.external_id for i in drawn) != ["i00", "i01", "i02"]  # the seed draws others
    after = study_design_summary(study=study)
    assert after.missing_rationales  # of the drawn items, some have no rationale
    assert (preview.items, preview.missing_rationales) == (after.items, after.missing_rationales)
