from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from annotations.selectors.cost import study_cost_and_pay
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import Study, StudyShare
from studies.selectors import PAY, study_design_summary, study_user_may
from studies.services.importers import rationales_import
from studies.services.sharing import study_share
from studies.services.studies import StudyError, study_create, study_sample_items, study_update
from tests.annotations.factories import make_study
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
    assert s.worker_hours == Decimal("68.7")
    cost = study_cost_and_pay(study=study)  # the one cost-and-pay reading (annotations owns it)
    assert cost.tasks == 687 and cost.estimate.rewards == Decimal("1374.00")
    assert cost.estimate.fees == Decimal("0") and cost.estimate.total == Decimal("1374.00")  # participant links
    assert cost.pay.figure == Decimal("20.00") and not cost.pay.below_floor


@pytest.mark.parametrize("platform, per_hit, rate, fees", [
    ("mturk", None, Decimal("0.20"), Decimal("274.80")),  # HITs of RL_MTURK_MAX_ASSIGNMENTS_PER_HIT (9)
    ("mturk", 9, Decimal("0.20"), Decimal("274.80")),
    ("mturk", 10, Decimal("0.40"), Decimal("546.80")),  # 68 HITs of 10 at 40%, the last of 7 at 20%
    ("prolific", None, Decimal("0.3333"), Decimal("457.95")),  # RL_PROLIFIC_FEE_RATE
    ("link", None, Decimal("0"), Decimal("0.00")),
])
def test_platform_fee(utility_setup, platform, per_hit, rate, fees):
    dataset, sources = utility_setup
    study = study_create(name=f"fee-{platform}-{per_hit}", dataset=dataset, sources=sources, reward="2.00",
                         platform=platform)
    e = study_cost_and_pay(study=study, max_assignments_per_hit=per_hit).estimate
    assert e.fee_rate == rate
    assert e.fees == fees
    assert e.total == e.rewards + e.fees


def test_pay_below_floor_is_flagged():
    dataset = DatasetFactory()
    item = ItemFactory(dataset=dataset, split="test")
    source = RationaleSourceFactory()
    RationaleFactory(item=item, source=source)
    study = study_create(name="cheap", dataset=dataset, sources=[source], reward="1.00",
                         estimated_minutes_per_task="6.0", hourly_pay_floor="15.00")
    cost = study_cost_and_pay(study=study)
    assert cost.pay.figure == Decimal("10.00") and cost.pay.below_floor
    assert any("below the floor" in w and "at least 1.50" in w for w in cost.warnings)


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


def test_a_sample_of_no_items_is_refused_naming_the_field(utility_setup):
    """A sample size of 0 drew a study of no items, whose design summary then said the split had
    none to import (the admin's field takes 0)."""
    dataset, sources = utility_setup
    with pytest.raises(StudyError, match="at least 1: leave it empty to take all") as refused:
        study_create(name="none", dataset=dataset, sources=sources, item_sample_size=0)
    assert "item_sample_size" in refused.value.problems
    assert not Study.objects.filter(name="none").exists()


def test_empty_split_and_no_sources_are_refused():
    dataset = DatasetFactory()
    ItemFactory(dataset=dataset, split="test")
    with pytest.raises(StudyError, match="at least one rationale source"):
        study_create(name="x", dataset=dataset, sources=[])
    with pytest.raises(StudyError, match="no items in the dev split"):
        study_create(name="x", dataset=dataset, split="dev", sources=[RationaleSourceFactory()])
    assert not Study.objects.exists()


def test_update_resamples_drafts_only():
    dataset = DatasetFactory()
    source = RationaleSourceFactory()
    for _ in range(10):
        RationaleFactory(item=ItemFactory(dataset=dataset, split="test"), source=source)
    study = study_create(name="u", dataset=dataset, sources=[source])
    assert study.items.count() == 10
    study_update(study=study, user=None, item_sample_size=4)
    assert study.items.count() == 4
    study_update(study=study, user=None, consent_text="I agree.")
    study = study_open(study=study, user=OPERATOR)  # the way the app opens it (the questionnaire builds the units)
    with pytest.raises(StudyError, match="no longer a draft .open.: its items cannot change"):
        study_update(study=study, user=None, item_sample_size=3)
    with pytest.raises(StudyError, match="only a draft"):
        study_sample_items(study=study, user=None)
    # What workers read still changes (the reward is fixed once open: test_services_studies_fixed_terms.py).
    study_update(study=study, user=None, instructions="Read carefully.")
    study.refresh_from_db()
    assert study.instructions == "Read carefully." and study.items.count() == 4


# --- A study is handed only to an active account, as it is shared only with one --------------------
def _researcher(username: str, *, active: bool = True):
    user = get_user_model().objects.create_user(username=username, password="pw", is_staff=True, is_active=active)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="studies"))
    return get_user_model().objects.get(pk=user.pk)


def test_study_update_refuses_to_hand_a_study_to_an_inactive_account():
    # Given Bob's study and Carol's closed account
    bob, carol = _researcher("bob"), _researcher("carol", active=False)
    study = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=bob, name="bobs")
    # When Bob (or the operator) hands it to Carol, Then it is refused naming the owner field
    for user in (bob, None):
        with pytest.raises(StudyError, match="not found or not active") as refused:
            study_update(study=Study.objects.get(pk=study.pk), user=user, owner=carol)
        assert set(refused.value.problems) == {"owner"}
    assert Study.objects.get(pk=study.pk).owner == bob
    # An active account receives it.
    dora = _researcher("dora")
    study_update(study=Study.objects.get(pk=study.pk), user=bob, owner=dora)
    assert Study.objects.get(pk=study.pk).owner == dora


def test_study_create_refuses_a_study_made_for_an_inactive_account(admin_user):
    dataset = DatasetFactory(name="ds-inactive-owner")
    source = RationaleSourceFactory(name="src-inactive-owner")
    RationaleFactory(item=ItemFactory(dataset=dataset, split="test", external_id="q1"), source=source)
    carol = _researcher("carol", active=False)
    for user in (admin_user, None):  # a superuser, the operator
        with pytest.raises(StudyError, match="not found or not active") as refused:
            study_create(name="for-carol", dataset=dataset, sources=[source], consent_text="ok", owner=carol,
                         user=user)
        assert set(refused.value.problems) == {"owner"}
    assert not Study.objects.filter(name="for-carol").exists()


# --- A handover leaves no share behind, and goes only to an owner who could change the study -------
def test_a_handover_deletes_the_new_owners_share_so_handing_it_on_keeps_no_pay_level():
    # Given Alice's study shared with Bob at the pay level
    alice, bob, carol = _researcher("alice"), _researcher("bob"), _researcher("carol")
    study = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=alice, name="alices")
    study_share(study=study, user=alice, with_user=bob, level=StudyShare.Level.PAY)
    # When Alice hands it to Bob: the owner needs no share, and Alice keeps none (she had none)
    study_update(study=Study.objects.get(pk=study.pk), user=alice, owner=bob)
    assert not StudyShare.objects.filter(study=study).exists()
    assert not study_user_may(user=alice, study=study)
    # When Bob hands it on to Carol, Then Bob keeps nothing: no pay level (approve, bonus, publish)
    study_update(study=Study.objects.get(pk=study.pk), user=bob, owner=carol)
    bob = get_user_model().objects.get(pk=bob.pk)
    assert not StudyShare.objects.filter(study=study).exists()
    assert not study_user_may(user=bob, study=study, access=PAY)
    assert not study_user_may(user=bob, study=study)
    assert study_user_may(user=get_user_model().objects.get(pk=carol.pk), study=study, access=PAY)


def test_a_handover_keeps_the_shares_of_everyone_else():
    alice, bob, dora = _researcher("alice"), _researcher("bob"), _researcher("dora")
    study = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=alice, name="alices")
    study_share(study=study, user=alice, with_user=dora, level=StudyShare.Level.CHANGE)
    study_update(study=Study.objects.get(pk=study.pk), user=alice, owner=bob)
    assert list(StudyShare.objects.filter(study=study).values_list("user__username", "level")) == [("dora", "change")]


def test_study_update_refuses_an_owner_who_may_not_change_studies(admin_user):
    # Given Bob's study and Erin: active and staff, but without studies.change_study
    bob = _researcher("bob")
    erin = get_user_model().objects.create_user(username="erin", password="pw", is_staff=True)
    erin.user_permissions.add(*Permission.objects.filter(content_type__app_label="studies")
                              .exclude(codename="change_study"))
    study = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=bob, name="bobs")
    # When Bob, a superuser or the operator hands it to Erin, Then it is refused naming the owner field
    # (as the owner she could not close it, nor could its early stop, which acts as the owner)
    for user in (bob, admin_user, None):
        with pytest.raises(StudyError, match="may not change studies") as refused:
            study_update(study=Study.objects.get(pk=study.pk), user=user, owner=erin)
        assert set(refused.value.problems) == {"owner"} and "studies.change_study" in refused.value.problems["owner"]
    assert Study.objects.get(pk=study.pk).owner == bob
    # She may still be shared with (a share's recipient needs only to be active), and a superuser
    # without the permission itself may own it.
    study_share(study=study, user=bob, with_user=erin, level=StudyShare.Level.VIEW)
    root = get_user_model().objects.create_superuser(username="root", password="pw")
    study_update(study=Study.objects.get(pk=study.pk), user=bob, owner=root)
    assert Study.objects.get(pk=study.pk).owner == root
