"""The cockpit's pages as a researcher's browser lays them out (issue 22 item 12), in headless
Chromium at 1,400 px: the study page's buttons sit below its name, the answers list scrolls beside
its filters with a readable question column, and a queued score run shows no empty error box.
Screenshots are kept under ``test-results/journey/`` beside the journey's."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from playwright.sync_api import Page, expect

from scoring.models import ScoreRun
from studies.models import Platform
from tests.work import open_utility_study, work

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-results" / "journey"


def boxes_overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_cockpit_pages_lay_out_at_1400_px(live_server, page: Page):
    get_user_model().objects.create_superuser("ada", "ada@example.org", "pw-ada-123")
    study = open_utility_study(name="A study whose name is long enough to reach the buttons on the right",
                               n_items=4, n_sources=2, quota=2, units_per_task=4,
                               source_names=["gpt3", "t5large"])
    for worker in ("w1", "w2", "w3", "w4"):
        work(study, worker, platform=Platform.LINK)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.set_default_timeout(20_000)
    page.goto(live_server.url + "/admin/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "pw-ada-123")
    page.click("input[type=submit]")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    page.goto(live_server.url + reverse("admin:studies_study_change", args=[study.pk]))
    tools = page.locator("ul.object-tools")
    assert tools.locator("li").count() >= 10  # the study's pages, preview, import, history
    for heading in page.locator("#content > h1, #content > h2").all():
        assert not boxes_overlap(tools.bounding_box(), heading.bounding_box()), heading.inner_text()
    page.screenshot(path=str(ARTIFACTS / "round2-study-page.png"), full_page=True)

    page.goto(live_server.url + reverse("admin:annotations_annotation_changelist")
              + f"?claim__study__id__exact={study.pk}")
    page.screenshot(path=str(ARTIFACTS / "round2-answers.png"), full_page=True)
    table, sidebar = page.locator("#result_list").bounding_box(), page.locator("#changelist-filter").bounding_box()
    results = page.locator("#changelist .results").bounding_box()
    assert results["x"] + results["width"] <= sidebar["x"] + 1  # the table's column ends where the filters begin
    assert page.locator("#result_list td.field-question").first.bounding_box()["width"] >= 200
    assert table["height"] < 80 * page.locator("#result_list tbody tr").count()  # rows are not 10-character wraps

    run = ScoreRun.objects.create(study=study)  # queued, as "Score now" leaves it before a worker takes it
    page.goto(live_server.url + reverse("admin:scoring_scorerun_state", args=[run.pk]))
    expect(page.locator("#run-status")).to_contain_text("Queued")
    expect(page.locator("#run-error")).to_be_hidden()
    page.screenshot(path=str(ARTIFACTS / "round2-run-queued.png"), full_page=True)
