"""The one definition of per-study access (``studies.selectors.studies_for_user``): superusers reach
every study, everyone else the studies they own and those shared with them, whatever their staff
flag; changing needs ``studies.change_study``, moving money ``studies.pay_workers``."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from studies.selectors import (
    CHANGE,
    PAY,
    VIEW,
    datasets_for_user,
    generalization_questions_for_user,
    items_for_user,
    rationales_for_user,
    sources_for_user,
    studies_for_user,
    study_user_may,
    user_may_see_raw_worker_ids,
)
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.factories import (
    DatasetFactory,
    GeneralizationQuestionFactory,
    ItemFactory,
    RationaleFactory,
    RationaleSourceFactory,
)

pytestmark = pytest.mark.django_db


def _user(name, *, staff=False, superuser=False, perms=()):
    User = get_user_model()
    user = User.objects.create_user(username=name, password="pw", is_staff=staff or superuser, is_superuser=superuser)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return get_user_model().objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def world():
    owner = _user("dana")
    colleague = _user("lee")
    dataset = DatasetFactory(name="sqa")
    items = [ItemFactory(dataset=dataset) for _ in range(3)]
    other_item = ItemFactory(dataset=DatasetFactory(name="obqa"))
    source, unused_source = RationaleSourceFactory(name="gpt3"), RationaleSourceFactory(name="t5")
    shown = [RationaleFactory(item=i, source=source) for i in items]
    hidden = RationaleFactory(item=items[0], source=unused_source)  # a source the study does not use
    genq = GeneralizationQuestionFactory(item=items[0])
    study = study_create(name="danas", dataset=dataset, sources=[source], owner=owner)
    study.shared_with.add(colleague)
    other = study_create(name="olgas", dataset=dataset, sources=[source], owner=_user("olga"))
    return {"owner": owner, "colleague": colleague, "study": study, "other": other, "items": items,
            "other_item": other_item, "source": source, "unused_source": unused_source, "shown": shown,
            "hidden": hidden, "genq": genq, "dataset": dataset}


def test_owner_and_colleague_see_their_study_only(world):
    for user in (world["owner"], world["colleague"]):
        assert list(studies_for_user(user=user)) == [world["study"]]
        assert not study_user_may(user=user, study=world["other"])


def test_staff_without_rights_sees_nothing(world):
    staff = _user("sam", staff=True)
    assert not studies_for_user(user=staff).exists()
    assert not items_for_user(user=staff).exists()
    assert not rationales_for_user(user=staff).exists()
    assert not user_may_see_raw_worker_ids(staff)


def test_superuser_sees_every_study(world):
    root = _user("root", superuser=True)
    assert set(studies_for_user(user=root, access=PAY)) == {world["study"], world["other"]}
    assert user_may_see_raw_worker_ids(root)


def test_change_and_pay_need_their_permission_on_top_of_membership(world):
    owner = world["owner"]
    assert not studies_for_user(user=owner, access=CHANGE).exists()
    assert not studies_for_user(user=owner, access=PAY).exists()
    editor = _user("ed", perms=["studies.change_study", "studies.pay_workers"])
    assert not studies_for_user(user=editor, access=CHANGE).exists()  # a permission is not membership
    study_share(study=world["study"], user=world["owner"], with_user=editor, level="pay")
    assert list(studies_for_user(user=editor, access=CHANGE)) == [world["study"]]
    assert list(studies_for_user(user=editor, access=PAY)) == [world["study"]]


def test_a_share_grants_its_level_and_the_ones_below_it_only(world):
    # Regression (issue 20, item 8): a share granted change and pay whatever it was meant for.
    editor = _user("ed", perms=["studies.change_study", "studies.pay_workers"])
    study, owner = world["study"], world["owner"]
    reaches = {}
    for level in ("view", "change", "pay"):
        study_share(study=study, user=owner, with_user=editor, level=level)
        reaches[level] = [access for access in (VIEW, CHANGE, PAY) if study_user_may(user=editor, study=study,
                                                                                      access=access)]
    assert reaches == {"view": [VIEW], "change": [VIEW, CHANGE], "pay": [VIEW, CHANGE, PAY]}


def test_only_the_owner_shares_a_study_and_a_share_cannot_raise_itself(world):
    from studies.services.studies import StudyError

    study, colleague = world["study"], world["colleague"]
    grant = _user("ed", perms=["studies.change_study", "studies.pay_workers"])
    study_share(study=study, user=world["owner"], with_user=grant, level="change")
    for who, with_user in ((grant, grant), (grant, colleague), (_user("olga2", staff=True), colleague)):
        with pytest.raises(StudyError, match="not found or not yours to share"):
            study_share(study=study, user=who, with_user=with_user, level="pay")
    assert not study_user_may(user=grant, study=study, access=PAY)


def test_reference_data_is_what_visible_studies_use_without_the_view_permission(world):
    owner = world["owner"]
    assert set(items_for_user(user=owner)) == set(world["items"])
    assert list(sources_for_user(user=owner)) == [world["source"]]
    assert set(rationales_for_user(user=owner)) == set(world["shown"])  # not the unused source's
    assert list(generalization_questions_for_user(user=owner)) == [world["genq"]]
    assert list(datasets_for_user(user=owner)) == [world["dataset"]]


def test_the_view_permission_opens_the_whole_library(world):
    reader = _user("reader", perms=["studies.view_item", "studies.view_rationale"])
    assert world["other_item"] in items_for_user(user=reader)
    assert not sources_for_user(user=reader).exists()
    assert world["hidden"] not in rationales_for_user(user=reader)  # read with its source, which he may not read
    librarian = _user("librarian", perms=["studies.view_item", "studies.view_rationalesource",
                                          "studies.view_rationale"])
    assert world["hidden"] in rationales_for_user(user=librarian)


def test_anonymous_and_inactive_users_see_nothing(world):
    from django.contrib.auth.models import AnonymousUser

    assert not studies_for_user(user=AnonymousUser()).exists()
    owner = world["owner"]
    owner.is_active = False
    assert not studies_for_user(user=owner, access=VIEW).exists()


def test_unknown_access_is_a_programming_error(world):
    with pytest.raises(ValueError, match="access must be one of"):
        studies_for_user(user=world["owner"], access="edit")
