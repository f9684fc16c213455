from decimal import Decimal

import pytest

from annotations.services.opening import study_open
from studies.models import Study
from studies.selectors import study_design_summary
from studies.services.importers import rationales_import
from studies.services.studies import StudyError, study_create, study_sample_items, study_update
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def utility_setup(sqa_test_imported, strategyqa_dir):
    rationales_import(file=strategyqa_dir / "rationale_utility.json", dataset_name="StrategyQA", split="test")
    from studies.models import Dataset, RationaleSource

    return Dataset.objects.get(name="StrategyQA"), list(RationaleSource.objects.order_by("name"))


def test_paper_design_numbers(utility_setup):
    dataset, sources = utility_setup
    study = study_create(name="Replication", dataset=dataset, kind="utility", split="test", sources=sources,
                         annotators_per_unit=5, units_per_task=10, reward=Decimal("2.00"),
                         estimated_minutes_per_task=Decimal("6.0"))
    s = study_design_summary(study=study)
    assert (s.items, s.sources, s.units) == (458, 3, 1374)
    assert s.answers == 6870
    assert s.tasks == 687
    assert s.missing_rationales == 0
    assert s.base_cost == Decimal("1374.00")
    assert s.fee == Decimal("0") and s.total_cost == Decimal("1374.00")  # participant links
    assert s.hourly_pay == Decimal("20.00") and not s.below_floor
    assert s.worker_hours == Decimal("68.7")


@pytest.mark.parametrize("platform, per_hit, rate", [
    ("mturk", None, Decimal("0.40")),  # all 687 tasks in one HIT
    ("mturk", 9, Decimal("0.20")),
    ("mturk", 10, Decimal("0.40")),
    ("prolific", None, Decimal("0.333")),
    ("link", None, Decimal("0")),
])
def test_platform_fee(utility_setup, platform, per_hit, rate):
    dataset, sources = utility_setup
    study = study_create(name=f"fee-{platform}-{per_hit}", dataset=dataset, sources=sources, reward="2.00",
                         platform=platform)
    s = study_design_summary(study=study, assignments_per_hit=per_hit)
    assert s.fee_rate == rate
    assert s.fee == (Decimal("1374.00") * rate).quantize(Decimal("0.01"))
    assert s.total_cost == s.base_cost + s.fee


def test_pay_below_floor_is_flagged():
    dataset = DatasetFactory()
    item = ItemFactory(dataset=dataset, split="test")
    source = RationaleSourceFactory()
    RationaleFactory(item=item, source=source)
    study = study_create(name="cheap", dataset=dataset, sources=[source], reward="1.00",
                         estimated_minutes_per_task="6.0", hourly_pay_floor="15.00")
    s = study_design_summary(study=study)
    assert s.hourly_pay == Decimal("10.00") and s.below_floor
    assert any("below the floor" in w and "$1.50" in w for w in s.warnings)


def test_tasks_round_up_and_missing_rationales_are_counted():
    dataset = DatasetFactory()
    items = [ItemFactory(dataset=dataset, split="test") for _ in range(7)]
    a, b = RationaleSourceFactory(), RationaleSourceFactory()
    for item in items:
        RationaleFactory(item=item, source=a)
    study = study_create(name="odd", dataset=dataset, sources=[a, b], annotators_per_unit=3, units_per_task=4)
    s = study_design_summary(study=study)
    # The units that opening builds now: (item, source) pairs without a rationale are skipped.
    # 7 units x 3 workers in tasks of 4 (7 distinct questions): 21 answers, 6 tasks.
    assert (s.units, s.answers, s.tasks) == (7, 21, 6)
    assert s.missing_rationales == 7
    assert any("7 (item, source) pairs have no rationale yet" in w for w in s.warnings)


def test_sample_is_deterministic_and_sized(utility_setup):
    dataset, sources = utility_setup
    one = study_create(name="s1", dataset=dataset, sources=sources, item_sample_size=50, sample_seed=7)
    two = study_create(name="s2", dataset=dataset, sources=sources, item_sample_size=50, sample_seed=7)
    three = study_create(name="s3", dataset=dataset, sources=sources, item_sample_size=50, sample_seed=8)
    ids = lambda s: sorted(s.items.values_list("id", flat=True))  # noqa: E731
    assert len(ids(one)) == 50
    assert ids(one) == ids(two)
    assert ids(one) != ids(three)
    assert set(one.items.values_list("split", flat=True)) == {"test"}


def test_sample_larger_than_split_is_refused(utility_setup):
    dataset, sources = utility_setup
    with pytest.raises(StudyError, match="larger than the 458 items"):
        study_create(name="big", dataset=dataset, sources=sources, item_sample_size=500)
    assert not Study.objects.filter(name="big").exists()


def test_empty_split_and_no_sources_are_refused():
    dataset = DatasetFactory()
    ItemFactory(dataset=dataset, split="test")
    with pytest.raises(StudyError, match="at least one rationale source"):
        study_create(name="x", dataset=dataset, sources=[])
    with pytest.raises(StudyError, match="no items in split 'dev'"):
        study_create(name="x", dataset=dataset, split="dev", sources=[RationaleSourceFactory()])
    assert not Study.objects.exists()


def test_update_resamples_drafts_only():
    dataset = DatasetFactory()
    source = RationaleSourceFactory()
    for _ in range(10):
        RationaleFactory(item=ItemFactory(dataset=dataset, split="test"), source=source)
    study = study_create(name="u", dataset=dataset, sources=[source])
    assert study.items.count() == 10
    study_update(study=study, item_sample_size=4)
    assert study.items.count() == 4
    study_update(study=study, consent_text="I agree.")
    study = study_open(study=study)  # the way the app opens it (the questionnaire builds the units)
    with pytest.raises(StudyError, match="can no longer change"):
        study_update(study=study, item_sample_size=3)
    with pytest.raises(StudyError, match="only a draft"):
        study_sample_items(study=study)
    study_update(study=study, reward=Decimal("3.00"))
    study.refresh_from_db()
    assert study.reward == Decimal("3.00") and study.items.count() == 4
