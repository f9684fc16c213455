"""A bundle copy's worker page offers no Approve, Reject, Bonus or Block: its workers never worked
here and the services refuse each ("Nothing was done: ... imported from a study bundle ..."), so
the page reads the same rule (``annotations.services.platforms.access.study_imported``) as they do.
The study the bundle came from still offers them to its owner."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.models import Assignment
from scoring.services.bundle import bundle_import
from tests.scoring.test_bundle import _bundle, _worked_study

pytestmark = pytest.mark.django_db

PAY_FORMS = ('value="approve"', 'value="reject"', 'id="bonus-form"', 'id="block-form"')


def _worker_page(client: Client, study) -> str:
    task = Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED).order_by("pk").first()
    response = client.get(reverse("admin:studies_study_worker", args=[study.pk, task.participant_id]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_bundle_copys_worker_page_offers_no_review_bonus_or_block():
    owner = get_user_model().objects.create_superuser("imp", "imp@example.org", "pw")
    origin = _worked_study()
    copy = bundle_import(file=io.BytesIO(_bundle(origin)), name="copy", filename="s.zip", owner=owner)
    client = Client()
    client.force_login(owner)

    copied = _worker_page(client, copy)
    assert [form for form in PAY_FORMS if form in copied] == []
    assert 'id="worker-actions"' not in copied

    here = _worker_page(client, origin)  # run here: the same page offers them
    assert [form for form in PAY_FORMS if form in here] == list(PAY_FORMS)
