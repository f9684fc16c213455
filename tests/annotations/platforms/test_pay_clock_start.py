"""The effective hourly pay times a task from the start of its clock (``cost.TASK_TIME_RULE``,
``cost.task_minutes``), as the deadlines and the platform count it (``deadlines.task_clock_start``),
not from the consent. Before, a Prolific worker who read the landing page for 20 minutes and
submitted a minute after consenting was timed at 1 minute: a reward of 2 read as 120/h where
Prolific saw about 5.71/h, and no floor warning fired; a worker who re-entered the same SESSION_ID
at minute 15 and submitted at 16 was timed at 1 minute too. A plain link's task is made at the
consent, so its time still counts from there. Through the worker pages, with the project's clock."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Assignment
from annotations.selectors import cost
from annotations.selectors.cost import pay_reading, study_effective_hourly_pay
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, landing_form
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db

PROLIFIC = {"PROLIFIC_PID": "5a9d64f5f6dfdd0001eaa73d", "SESSION_ID": "5b0d64f5f6dfdd0001eaa73e"}
TASK = {"n_items": 6, "n_sources": 1, "units_per_task": 2, "estimated_minutes_per_task": 6, "reward": 2}


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch, timezone.now().replace(hour=12, minute=0, second=30, microsecond=0))


@pytest.fixture
def prolific_study(prolific, clock):
    """An open Prolific study (reward 2, floor 15/h) and the URL a worker arrives by from it."""
    study = make_study(platform=Platform.PROLIFIC, status="draft", **TASK)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, entry_url(study, STUDY_ID=publication.prolific_study_id, **PROLIFIC)


def _submit(client: Client, task_url: str) -> Assignment:
    complete_task(client, task_url)
    assert client.post(task_url + "submit").status_code == 302
    return Assignment.objects.get(status=Assignment.Status.SUBMITTED)


def test_reading_the_landing_page_counts_as_the_platform_counts_it(prolific_study, clock):
    study, url = prolific_study
    client = Client()
    form = landing_form(client, url)
    clock.advance(20)  # reading the landing page (instructions, example): Prolific's clock runs
    task_url = client.post(url, form)["Location"]
    clock.advance(1)

    _submit(client, task_url)

    hourly = study_effective_hourly_pay(study=study)
    assert hourly.n_recorded == 1
    assert hourly.median_minutes == 21.0  # not the 1.0 from the consent
    assert hourly.hourly_median == Decimal("5.71")  # what Prolific shows, not 120/h
    assert hourly.below_floor
    assert hourly.warnings == ["Median recorded time 21.0 min gives 5.71/hour, below the floor of 15.00/hour: "
                               "raise the reward to at least 5.25 or pay the difference as a bonus."]
    assert "median 21.0 min" in pay_reading(hourly=hourly).text


def test_a_reentry_is_timed_from_its_platform_assignments_first_start(prolific_study, clock):
    study, url = prolific_study
    client = Client()
    landed = clock.now
    first_url = client.post(url, landing_form(client, url))["Location"]
    clock.advance(3)
    assert client.post(first_url + "leave").status_code == 302  # returned at minute 3
    clock.now = landed + timedelta(minutes=15)
    response = client.post(url, landing_form(client, url))  # the same SESSION_ID again
    assert response.status_code == 302
    clock.advance(1)

    task = _submit(client, response["Location"])

    assert task.submitted_at - landed == timedelta(minutes=16)
    hourly = study_effective_hourly_pay(study=study)
    assert (hourly.n_recorded, hourly.median_minutes, hourly.hourly_median) == (1, 16.0, Decimal("7.50"))
    assert hourly.below_floor and hourly.warnings[0].startswith("Median recorded time 16.0 min gives 7.50/hour")


def test_a_plain_links_task_is_timed_from_the_consent(clock):
    """A link has no platform clock: its task's clock starts at the consent, and so does its time."""
    study = make_study(**TASK)
    client = Client()
    url = entry_url(study)
    form = landing_form(client, url)
    clock.advance(20)  # reading the landing page: no platform times a link's worker
    task_url = client.post(url, form)["Location"]
    clock.advance(8)

    _submit(client, task_url)

    hourly = study_effective_hourly_pay(study=study)
    assert (hourly.n_recorded, hourly.median_minutes, hourly.hourly_median) == (1, 8.0, Decimal("15.00"))
    assert not hourly.below_floor and not hourly.warnings


def test_the_recorded_pay_names_its_timing_rule():
    rule = getattr(cost, "TASK_TIME_RULE", "")
    assert "landing page" in rule and "consent" in rule
