"""``study_delete`` judges the stored study, locked until it is deleted, never the copy it is
handed: the admin's delete page passes the object it loaded before another request opened the
study, and an open study (its units, answers and payments the record) is never deleted."""
from __future__ import annotations

import pytest

from annotations.models import Annotation
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import Study
from studies.services.studies import StudyError, study_delete
from tests.annotations.factories import make_study
from tests.factories import staff
from tests.work import work

pytestmark = pytest.mark.django_db


def test_a_stale_draft_copy_of_a_study_opened_meanwhile_is_not_deleted():
    owner, _ = staff("olga")
    stale = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, units_per_task=2, owner=owner,
                       name="olgas-draft")
    # Another request opens it and a worker answers, while the admin's copy still reads "draft".
    study_open(study=Study.objects.get(pk=stale.pk), user=OPERATOR)
    work(Study.objects.get(pk=stale.pk), "worker-1")
    answers = Annotation.objects.filter(claim__assignment__study_id=stale.pk).count()
    assert answers and stale.status == Study.Status.DRAFT

    with pytest.raises(StudyError, match="is open: only a draft study can be deleted"):
        study_delete(study=stale, user=owner)
    assert Study.objects.filter(pk=stale.pk, status=Study.Status.OPEN).exists()
    assert Annotation.objects.filter(claim__assignment__study_id=stale.pk).count() == answers


def test_a_draft_deleted_meanwhile_is_answered_as_not_found():
    owner, _ = staff("olga")
    study = make_study(status=Study.Status.DRAFT, n_items=2, n_sources=1, owner=owner, name="olgas-draft")
    stale = Study.objects.get(pk=study.pk)
    study_delete(study=study, user=owner)
    assert not Study.objects.filter(pk=study.pk).exists()
    with pytest.raises(StudyError, match="not found or not yours to delete"):
        study_delete(study=stale, user=owner)
