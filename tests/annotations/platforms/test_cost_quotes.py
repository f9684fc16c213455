"""One cost-and-pay reading (issue 11, bug 6): the study page, the publish page, the API and
``publish_study --dry-run`` quote the same cost and the same hourly pay, with the fee rates from
settings and task times measured from consent to submission."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from annotations.models import Assignment
from annotations.selectors_cost import study_cost_and_pay, study_effective_hourly_pay
from tests.annotations.platforms.conftest import open_study, submitted


@pytest.fixture
def root_client(db):
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    return client


def _quotes(client, study, platform: str) -> dict[str, str]:
    """Each place's page or output, as text."""
    out = StringIO()
    call_command("publish_study", str(study.pk), "--platform", platform, "--dry-run", stdout=out)
    study.platform = platform
    study.save(update_fields=["platform"])  # the study page prices the study's own platform
    return {
        "study page": client.get(f"/admin/studies/study/{study.pk}/change/").content.decode(),
        "publish page": client.get(f"/admin/annotations/publication/publish/{study.pk}/?platform={platform}")
        .content.decode(),
        "dry run": out.getvalue(),
    }


@pytest.mark.parametrize("platform, rate, total", [
    ("mturk", "0.25", "35.00"),  # 14 tasks x 2.00 = 28.00, in HITs of 9 and 5 at RL_MTURK_FEE_RATE
    ("prolific", "0.3333", "37.33"),  # RL_PROLIFIC_FEE_RATE, not a hard-coded 0.333
])
def test_every_place_quotes_the_same_cost_and_pay(study, root_client, prolific, mturk, settings, platform, rate,
                                                  total):
    settings.RL_MTURK_FEE_RATE = "0.25"
    open_study(study)
    for i, minutes in enumerate([9, 10, 10, 10, 11]):
        submitted(study, platform="link", worker_id=f"lab-{i}", assignment_id="", minutes=minutes)
    cost = study_cost_and_pay(study=study, platform_name=platform)
    assert (str(cost.estimate.fee_rate), str(cost.estimate.total)) == (rate, total)
    assert cost.pay.basis == "recorded" and cost.pay.figure == Decimal("12.00")  # 2.00 for a median of 10 min (the estimate says 20.00)

    api = root_client.get(f"/api/v1/studies/{study.pk}/cost/?platform={platform}").json()
    assert (api["fee_rate"], api["total"], api["hourly_pay"]["figure"]) == (rate, total, "12.00")
    for place, text in _quotes(root_client, study, platform).items():
        assert total in text, place
        assert "12.00/h" in text, place


def test_hourly_pay_is_measured_from_consent_not_from_arrival(study):
    open_study(study)
    work = submitted(study, platform="link", worker_id="lab-1", assignment_id="", minutes=8)
    # The worker's row was made an hour before they consented (a landing page left open):
    # that hour is not work.
    Assignment.objects.filter(pk=work.pk).update(created_at=timezone.now() - dt.timedelta(hours=1))

    pay = study_effective_hourly_pay(study=study)

    assert pay.median_minutes == 8.0 and pay.hourly_median == Decimal("15.00")


def test_the_api_refuses_an_unknown_platform_with_a_clear_400(study, root_client):
    response = root_client.get(f"/api/v1/studies/{study.pk}/cost/?platform=fiverr")
    assert response.status_code == 400
    assert "fiverr" in json.dumps(response.json())
