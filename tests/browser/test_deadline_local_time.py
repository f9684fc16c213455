"""The task's deadline, written in UTC by the server (``templates/jinja2/annotations/_deadline.html``),
is shown by the page's script in the browser's own time with the minutes left, on the page the
consent brings and on the page an inline answer swaps in (scripts in a swapped-in page do not run:
the script of the first page converts it)."""
from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from annotations.models import Assignment
from annotations.platforms import handoff
from tests.annotations.factories import make_study
from tests.browser.pages import consent_and_start, next_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ZONE = "Asia/Kolkata"  # UTC+05:30: a local time that cannot be the UTC one


def _local(assignment: Assignment) -> str:
    return f"{assignment.expires_at.astimezone(ZoneInfo(ZONE)):%H:%M}"


def test_the_deadline_is_shown_in_local_time_after_an_inline_answer(live_server, browser):
    study = make_study(n_items=2, n_sources=1, units_per_task=2, estimated_minutes_per_task=6)
    context = browser.new_context(timezone_id=ZONE, locale="en-GB")
    page = context.new_page()
    page.goto(f"{live_server.url}/w/s/{handoff.study_token(study.pk)}/")
    expect(page.locator("#time-allowed")).to_contain_text("10 minutes to give your first answer")
    consent_and_start(page)
    time = page.locator("#deadline time")
    assignment = Assignment.objects.get()
    expect(page.locator("#deadline")).to_contain_text("Please give your first answer by")
    expect(time).to_contain_text(re.compile(rf"{_local(assignment)} your time \(in (9|10) minutes\)"))

    page.locator("fieldset").last.get_by_label("Yes", exact=True).check()
    with next_page(page):
        page.get_by_role("button", name="Save and continue").click()

    expect(page.locator("#rationale")).to_be_visible()  # the reveal, swapped in by the script
    assignment.refresh_from_db()
    expect(page.locator("#deadline")).to_contain_text("Please finish this task by")
    expect(time).to_contain_text(re.compile(rf"{_local(assignment)} your time \(in (29|30) minutes\)"))
    expect(time).to_have_attribute("title", re.compile(rf"^{assignment.expires_at:%H:%M} UTC"))
    context.close()
