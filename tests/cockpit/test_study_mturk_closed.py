"""The study page warns when a draft is set to run on MTurk while Amazon's closure holds
(``RL_MTURK_CLOSED_ON``, default 2026-09-30): it could never be published there. A warning, not a
refusal: a study already on MTurk keeps its platform while it is wound down."""
from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from studies.models import Study
from tests.annotations.factories import make_study
from tests.cockpit.test_study_setup import form_data

pytestmark = pytest.mark.django_db


def _set_platform(admin_client, study, platform: str):
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = {**form_data(admin_client.get(url)), "platform": platform}
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    return [str(m) for m in get_messages(response.wsgi_request)], admin_client.get(url).content.decode()


def test_choosing_mturk_for_a_draft_on_the_study_page_warns_of_the_closure(admin_client):
    study = make_study(n_items=2, n_sources=1, quota=2, status=Study.Status.DRAFT, platform="link")

    said, page = _set_platform(admin_client, study, "mturk")

    study.refresh_from_db()
    assert study.platform == "mturk"  # saved: a warning, not a refusal
    warnings = [m for m in said if "cannot be published" in m]
    assert len(warnings) == 1, said
    for words in ("closed Mechanical Turk for good on 2026-09-30", "RL_MTURK_CLOSED_ON", "Prolific",
                  "participant links"):
        assert words in warnings[0]
    # The design at a glance says it too, for as long as the draft names MTurk.
    assert "This study&#x27;s platform is MTurk, where it cannot be published" in page


def test_no_warning_for_another_platform_or_when_the_setting_is_empty(admin_client, settings):
    study = make_study(n_items=2, n_sources=1, quota=2, status=Study.Status.DRAFT, platform="mturk")
    said, page = _set_platform(admin_client, study, "prolific")
    assert not [m for m in said if "closed Mechanical Turk" in m] and "closed Mechanical Turk" not in page

    settings.RL_MTURK_CLOSED_ON = ""
    said, page = _set_platform(admin_client, study, "mturk")
    assert not [m for m in said if "closed Mechanical Turk" in m] and "closed Mechanical Turk" not in page
