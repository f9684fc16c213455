"""Checks beside the write: ``study_update``, ``study_sample_items`` and ``study_open`` check the
acting user's right to change the study themselves, so a caller that forgets the admin's filter
(the API, a page, a command, a task) gets the admin's answer. A VIEW share or
``studies.change_study`` without a share is refused and changes nothing; a CHANGE share and the
operator (``None`` for the studies services, ``OPERATOR`` for ``study_open``) succeed."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Unit
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR, PlatformAccessDenied
from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from studies.services.studies import StudyError, study_sample_items, study_update
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

@pytest.fixture
def world():
    """Olga's draft study of 4 items (drawn whole), set to draw a sample of 2 when re-sampled, and
    one researcher per right, each holding every model permission (``studies.change_study`` too)."""
    olga, _ = staff_client("olga")
    study = make_study(status=Study.Status.DRAFT, n_items=4, n_sources=1, owner=olga, name="olgas-secret-study")
    Study.objects.filter(pk=study.pk).update(item_sample_size=2, sample_seed=7)  # a re-sample changes the items
    study.refresh_from_db()
    users = {"stranger": staff_client("stan")[0]}
    for name, level in (("viewer", StudyShare.Level.VIEW), ("changer", StudyShare.Level.CHANGE)):
        users[name] = staff_client(name)[0]
        study_share(study=study, user=olga, with_user=users[name], level=level)
    return study, users


def state(study: Study) -> tuple:
    row = Study.objects.get(pk=study.pk)
    return (row.status, row.reward, row.consent_text, set(row.items.values_list("pk", flat=True)),
            Unit.objects.filter(study=row).count())


CALLS = {
    "study_update": lambda study, user: study_update(study=study, user=user, reward=Decimal("9.99")),
    "study_sample_items": lambda study, user: study_sample_items(study=study, user=user),
    "study_open": lambda study, user: study_open(study=study, user=user),
}


@pytest.mark.parametrize("service", CALLS)
@pytest.mark.parametrize("who", ["viewer", "stranger"])
def test_a_user_who_may_not_change_the_study_is_refused_by_the_service_and_nothing_changes(world, who, service):
    study, users = world
    before = state(study)
    assert len(before[3]) == 4 and before[0] == Study.Status.DRAFT
    refusal, says = ((PlatformAccessDenied, "not found or not yours to act on") if service == "study_open"
                     else (StudyError, "not found or not yours to change"))
    with pytest.raises(refusal, match=says) as refused:
        CALLS[service](Study.objects.get(pk=study.pk), users[who])
    assert str(study.pk) in str(refused.value) and study.name not in str(refused.value)  # not named to them
    assert state(study) == before


@pytest.mark.parametrize("who", ["changer", "operator"])
def test_a_change_share_and_the_operator_may_change_resample_and_open(world, who):
    study, users = world
    user = users.get(who)  # the operator: None for the studies services, OPERATOR for study_open
    study_update(study=Study.objects.get(pk=study.pk), user=user, reward=Decimal("9.99"))
    assert Study.objects.get(pk=study.pk).reward == Decimal("9.99")
    assert len(study_sample_items(study=Study.objects.get(pk=study.pk), user=user)) == 2
    opened = study_open(study=Study.objects.get(pk=study.pk), user=user or OPERATOR)
    assert opened.status == Study.Status.OPEN
    assert Unit.objects.filter(study=study).count() == 2


def test_nobody_acting_is_refused_by_study_open(world):
    study, _ = world
    with pytest.raises(PlatformAccessDenied, match="nobody is acting"):
        study_open(study=study, user=None)
    assert Study.objects.get(pk=study.pk).status == Study.Status.DRAFT

