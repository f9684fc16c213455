"""A researcher sets up the attention checks and the qualification test on the study page in
Chromium (the admin's "Add another" inlines), and a worker then meets both."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from playwright.sync_api import Page, expect

from annotations.models import AttentionCheck, QualificationGrant, QualificationTest
from tests.annotations.factories import make_study
from tests.browser.test_worker_flows import choose, consent_and_start, entry

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_attention_check_and_qualification_set_up_on_the_study_page(live_server, page: Page, browser):
    get_user_model().objects.create_superuser("rita", "rita@example.org", "pw-rita-123")
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    page.goto(live_server.url + "/admin/")
    page.fill("#id_username", "rita")
    page.fill("#id_password", "pw-rita-123")
    page.click("input[type=submit]")

    page.goto(live_server.url + reverse("admin:studies_study_change", args=[study.pk]))
    page.locator(".add-row a", has_text="Add another Attention check").click()
    page.fill("#id_attention_checks-0-question", "Attention: choose No")
    page.fill("#id_attention_checks-0-choices", '["yes", "no"]')
    page.fill("#id_attention_checks-0-correct_answer", "no")
    page.locator(".add-row a", has_text="Add another Qualification test").click()
    page.fill("#id_qualification_test-0-pass_mark", "2")
    page.fill("#id_qualification_test-0-questions", "Is Paris in France? | yes\nWhich is a mammal? | whale | whale; shark")
    page.click("input[name=_continue]")
    expect(page.locator("ul.messagelist").first).to_contain_text("was changed successfully")
    expect(page.locator("#id_qualification_test-0-questions")).to_have_value(
        "Is Paris in France? | yes\nWhich is a mammal? | whale | whale; shark")
    assert AttentionCheck.objects.get(study=study).correct_answer == "no"
    assert QualificationTest.objects.get(study=study).questions.count() == 2

    worker = browser.new_context().new_page()
    worker.goto(entry(live_server, study))
    consent_and_start(worker)
    expect(worker.get_by_role("heading", name="Qualification test")).to_be_visible()
    worker.locator("fieldset").nth(0).get_by_label("Yes", exact=True).check()
    worker.locator("fieldset").nth(1).get_by_label("whale", exact=True).check()
    worker.get_by_role("button", name="Submit the test").click()
    expect(worker.locator("#progress-text")).to_have_text("Question 1 of 2")  # the unit and the attention check
    choose(worker, "Yes")
    choose(worker, "Yes")
    expect(worker.locator("legend")).to_have_text("Attention: choose No")
    choose(worker, "no")
    expect(worker.get_by_role("button", name="Finish the task")).to_be_visible()
    assert QualificationGrant.objects.get().passed
