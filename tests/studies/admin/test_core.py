"""``studies.admin.core``: an import record is an audit trail, never deleted through the admin.
A bundle copy's record is what makes it a copy (``access.study_imported``, ``bundle_copy_ids``,
``scoring.selectors.bundle_scores``, the withdrawals that reach it): deleting it turned the copy
into a study run here, whose imported workers could be approved and paid."""
from __future__ import annotations

import io

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory
from django.urls import reverse

from annotations.models import Assignment, ConsentReceipt, QualificationGrant
from annotations.services.platforms.access import PlatformAccessDenied, bundle_copy_ids, study_imported
from annotations.services.platforms.review import assignment_approve
from scoring.models import ScoreRun
from scoring.selectors import bundle_scores
from scoring.services import study_score
from scoring.services.bundle import bundle_import
from studies.models import ImportJob, ImportRecord, StudyShare
from studies.services.sharing import study_share
from tests.api.conftest import grant
from tests.scoring.test_bundle import _bundle, _worked_study

pytestmark = pytest.mark.django_db

# Models whose rows are an audit trail: what was imported, consented to, graded or scored.
AUDIT_TRAIL = (ImportRecord, ImportJob, ConsentReceipt, QualificationGrant, ScoreRun)


def _staff(name: str, *perms: str):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    return grant(user, *perms)


def test_a_reader_of_a_bundle_copys_record_cannot_delete_it():
    # Given: Bob's copy of Olga's worked study, shared with Sam to view; Sam holds the model permissions.
    bob = _staff("bob", "studies.add_study", "studies.view_study", "studies.change_study")
    sam = _staff("sam", "studies.view_study", "studies.view_importrecord", "studies.delete_importrecord",
                 "studies.change_importrecord")
    original = _worked_study()
    study_score(study=original, similarity=False)
    copy = bundle_import(file=io.BytesIO(_bundle(original)), name="copy", filename="s.zip", owner=bob)
    study_share(study=copy, user=bob, with_user=sam, level=StudyShare.Level.VIEW)
    record = ImportRecord.objects.get(kind="bundle")
    client = Client()
    client.force_login(sam)
    assert client.get(reverse("admin:studies_importrecord_change", args=[record.pk])).status_code == 200  # reads it
    imported = study_imported(copy)
    assert imported.startswith("it was imported from a study bundle")

    # When: Sam asks the list's "Delete selected" and the record's delete page.
    changelist = reverse("admin:studies_importrecord_changelist")
    client.post(changelist, {"action": "delete_selected", "_selected_action": [record.pk], "post": "yes"})
    assert client.post(reverse("admin:studies_importrecord_delete", args=[record.pk]),
                       {"post": "yes"}).status_code == 403

    # Then: the record stays, and the copy is still a copy.
    assert ImportRecord.objects.filter(pk=record.pk).exists()
    assert study_imported(copy) == imported
    assert list(bundle_copy_ids(original=original.pk).values_list("copy_id", flat=True)) == [copy.pk]
    assert bundle_scores(study=copy) is not None
    task = Assignment.objects.filter(study=copy, status=Assignment.Status.SUBMITTED).order_by("pk").first()
    with pytest.raises(PlatformAccessDenied):
        assignment_approve(user=bob, study=copy, assignment=task)


def test_no_admin_of_an_audit_trail_model_offers_delete():
    """Whoever asks (a superuser here): no delete permission (asked with no row, as "Delete selected"
    and the list ask it) and no "Delete selected"."""
    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw")
    request = RequestFactory().get("/admin/")
    request.user = root
    for model in AUDIT_TRAIL:
        model_admin = admin.site._registry[model]
        assert not model_admin.has_delete_permission(request), model
        assert "delete_selected" not in model_admin.get_actions(request), model
