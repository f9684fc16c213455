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
from annotations.selectors.cost import questions_per_task, study_cost_and_pay, study_effective_hourly_pay
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import on_platform, open_study, submitted


@pytest.fixture
def root_client(db):
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    return client


def _quotes(client, study, platform: str) -> dict[str, str]:
    """Each place's page or output, as text."""
    out = StringIO()
    call_command("publish_study", str(study.pk), "--platform", platform, "--dry-run", stdout=out)
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
    on_platform(study, platform)  # the study page and a publish price the study's own platform
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


def test_every_place_says_when_tasks_cannot_be_as_large_as_entered(root_client):
    """The issue's design: 8 items x 3 sources x 5 workers in tasks of 10. No worker sees a
    question twice, so a task holds 8; the study page warned, but the publish page said "15 tasks
    of 10 units" with no warning, and the hourly pace was counted on 10 questions a task."""
    study = make_study(n_items=8, n_sources=3, quota=5, units_per_task=10, n_genq=0)
    cost = study_cost_and_pay(study=study, platform_name="link")
    assert (cost.answers, cost.tasks, cost.largest_task) == (120, 15, 8)
    assert "at most 8 questions, not 10" in cost.warnings[0]
    assert questions_per_task(study=study) == 8

    api = root_client.get(f"/api/v1/studies/{study.pk}/cost/?platform=link").json()
    assert api["largest_task"] == 8 and "at most 8 questions, not 10" in api["warnings"][0]
    quotes = _quotes(root_client, study, "link")
    assert "15 tasks of 8 units" in quotes["publish page"]
    for place, text in quotes.items():
        assert "at most 8 questions, not 10" in text, place
    # The study page's design and cost share the warning: said once.
    assert quotes["study page"].count("at most 8 questions, not 10") == 1
