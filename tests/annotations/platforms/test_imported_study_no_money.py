"""A study imported from a bundle was run on another installation: its tasks belong to pseudonyms
(``bundle-<study>:w_...``) who never worked here. Approving, rejecting, paying a bonus to or
blocking them is refused where the right is checked (``access.access_study``, PAY), for the owner
and the operator alike, with the study and the reason named; nothing is written and the copy's
statuses stay those its results were scored from."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Assignment, Bonus, WorkerBlock
from annotations.services.platforms.access import OPERATOR, PlatformAccessDenied
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.review import assignment_approve, assignment_reject
from scoring.services.bundle import bundle_import
from tests.scoring.test_bundle import _bundle, _worked_study

pytestmark = pytest.mark.django_db


def test_a_study_imported_from_a_bundle_cannot_be_reviewed_or_paid():
    owner = get_user_model().objects.create_superuser("imp", "imp@example.org", "pw")
    study = _worked_study()
    assert not study.is_imported_outcome
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="copy", filename="s.zip", owner=owner)
    assert not copy.is_imported_outcome  # the bundle of a study run here says so: the import record tells
    statuses = dict(Assignment.objects.filter(study=copy).values_list("pk", "status"))
    task = Assignment.objects.filter(study=copy, status=Assignment.Status.SUBMITTED).first()
    assert task is not None

    for user in (owner, OPERATOR):
        with pytest.raises(PlatformAccessDenied) as approve:
            assignment_approve(user=user, study=copy, assignment=task)
        with pytest.raises(PlatformAccessDenied) as bonus:
            bonus_pay(user=user, study=copy, assignment=task, amount="5.00", reason="thanks")
        with pytest.raises(PlatformAccessDenied):
            assignment_reject(user=user, study=copy, assignment=task, feedback="Failed the checks, sorry.")
        with pytest.raises(PlatformAccessDenied):
            worker_block(user=user, study=copy, participant=task.participant, reason="spam")
        for refused in (approve, bonus):
            assert f"study {copy.pk} ('copy')" in str(refused.value)
            assert "imported from a study bundle" in str(refused.value)

    assert not Bonus.objects.filter(assignment__study=copy).exists()
    assert not WorkerBlock.objects.filter(participant=task.participant).exists()
    assert dict(Assignment.objects.filter(study=copy).values_list("pk", "status")) == statuses
    # the study it came from is reviewed as before
    original = Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED).first()
    assert assignment_approve(user=owner, study=study, assignment=original).status == Assignment.Status.APPROVED


def test_a_bundle_copys_pages_offer_no_publish_and_pay():
    """The cockpit's links read the same rule (``study_imported``): a bundle's copy keeps its
    answers and workers pages, not "Publish and pay"; the study it was made from keeps it."""
    from cockpit.views_common import study_links

    owner = get_user_model().objects.create_superuser("imp", "imp@example.org", "pw")
    study = _worked_study()
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="copy", filename="s.zip", owner=owner)

    assert "publish" in {key for key, _label, _url in study_links(study)}
    links = {key for key, _label, _url in study_links(copy)}
    assert "publish" not in links and {"answers", "workers"} <= links
