"""One cost-and-pay reading (issue 11, bug 6): the study page, the publish page, the API and
``publish_study --dry-run`` quote the same cost and the same hourly pay, with the fee rates from
settings and task times measured from the task's start to submission (``cost.TASK_TIME_RULE``;
``test_pay_clock_start`` times platform arrivals and links)."""
from __future__ import annotations

import json
import re
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from annotations.selectors.cost import questions_per_task, study_cost_and_pay
from annotations.selectors.progress import study_progress
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.design import study_capacity
from studies.models import GeneralizationQuestion, Study
from studies.services.questions import generalization_questions_set_validation
from studies.services.studies import study_update
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import on_platform, open_study, submitted
from tests.factories import GeneralizationQuestionFactory


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


def _dry_run_sent(study) -> dict:
    """What a dry run of ``study`` on Prolific would send: the study draft's payload."""
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific", dry_run=True)
    return publication, publication.plan["requests"][0]["json"]


def test_an_open_study_quotes_and_publishes_what_its_units_collect_not_the_design_read_again(db, prolific,
                                                                                            admin_client):
    # 3 items x 1 generalization question x 2 sources = 6 units x 3 workers = 18 answers, in tasks
    # of 2 units (3 distinct questions): 9 tasks.
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_genq=1, n_sources=2, quota=3, units_per_task=2,
                       platform="prolific", reward=Decimal("2.00"), estimated_minutes_per_task=Decimal("6.0"))
    # A second question imported for an item after opening: the design read live gains 2 units
    # (24 answers), the built units do not. (A question marked invalid after opening closes its
    # units: tests/annotations/test_invalid_question_units.py.)
    GeneralizationQuestionFactory(item=study.items.order_by("pk").first(), text="A question added later?",
                                  answer="yes")
    assert study_capacity(study=study).answers == 24

    progress = study_progress(study=study)
    cost = study_cost_and_pay(study=study)
    publication, sent = _dry_run_sent(study)

    assert (progress.answers_to_collect, progress.tasks_planned) == (18, 9)
    assert (cost.answers, cost.tasks) == (progress.answers_to_collect, progress.tasks_planned)
    assert publication.n_tasks == sent["total_available_places"] == progress.tasks_planned
    # the study page shows one count: its design table is the cost reading's (it read the design again)
    page = admin_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert "<th>Answers to collect</th><td>18</td>" in page and "<th>Tasks</th><td>9</td>" in page


def test_a_question_marked_invalid_after_opening_is_neither_quoted_nor_published(db, prolific, admin_client):
    # The same 6 units; one question (2 units) judged invalid after opening, before any claim: its
    # units take nobody (``stopping.units_follow_question_validation``), so 4 units x 3 workers =
    # 12 answers, in tasks of 2 units (2 distinct questions): 6 tasks.
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_genq=1, n_sources=2, quota=3, units_per_task=2,
                       platform="prolific", reward=Decimal("2.00"), estimated_minutes_per_task=Decimal("6.0"))
    question = GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("pk").first()
    generalization_questions_set_validation(questions=[question], status=GeneralizationQuestion.Validation.INVALID)

    cost = study_cost_and_pay(study=study)
    publication, sent = _dry_run_sent(study)

    assert (cost.answers, cost.tasks) == (12, 6)  # it quoted 18 answers in 9 tasks
    assert study_progress(study=study).answers_to_collect == cost.answers
    assert publication.n_tasks == sent["total_available_places"] == cost.tasks
    page = admin_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert "<th>Answers to collect</th><td>12</td>" in page and "<th>Tasks</th><td>6</td>" in page


def test_a_draft_still_quotes_its_design_as_it_reads_now(db):
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_genq=1, n_sources=2, quota=3, units_per_task=2,
                       status="draft", reward=Decimal("2.00"))
    question = GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("pk").first()
    generalization_questions_set_validation(questions=[question], status=GeneralizationQuestion.Validation.INVALID)

    cost = study_cost_and_pay(study=study)

    assert (cost.answers, cost.tasks) == (12, 6)  # 4 units x 3 workers, in tasks of 2 (2 questions left)


def test_the_hourly_pay_quoted_is_the_pay_for_the_minutes_the_platform_shows(db, prolific):
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", platform="prolific",
                       reward=Decimal("1.55"), hourly_pay_floor=Decimal("15.00"),
                       estimated_minutes_per_task=Decimal("6.1"))

    _, sent = _dry_run_sent(study)
    cost = study_cost_and_pay(study=study)

    assert sent["estimated_completion_time"] == 7  # Prolific shows workers 1.55 for 7 min: 13.29/h
    assert cost.hourly.estimate_minutes == Decimal(sent["estimated_completion_time"])
    assert (cost.pay.figure, cost.pay.below_floor) == (Decimal("13.29"), True)
    assert any("below the floor of 15.00/h" in warning for warning in cost.warnings)


def _suggested_reward(warnings: list[str]) -> Decimal:
    found = [re.search(r"raise the reward to at least (\d+\.\d\d)", warning) for warning in warnings]
    return Decimal(next(match.group(1) for match in found if match))


def test_the_reward_suggested_to_reach_the_floor_does_reach_it(db):
    # 16.04/h for 7 min is 1.8713...: 1.87 pays 16.03/h, still below; 1.88 pays 16.11/h.
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft",
                       reward=Decimal("1.00"), hourly_pay_floor=Decimal("16.04"),
                       estimated_minutes_per_task=Decimal("7"))
    cost = study_cost_and_pay(study=study)
    suggested = _suggested_reward(cost.warnings)
    assert suggested == _suggested_reward(cost.hourly.warnings) == Decimal("1.88")

    study = study_update(study=study, user=None, reward=suggested)
    cost = study_cost_and_pay(study=study)

    assert cost.pay.below_floor is False and cost.pay.figure >= Decimal("16.04"), cost.warnings
    assert not cost.hourly.below_floor
