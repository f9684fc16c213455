"""A worker walks each questionnaire flow in headless Chromium."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from annotations.models import Annotation, Assignment, Participant, QualificationGrant, Unit
from annotations.platforms import handoff
from studies.models import Platform, Study
from tests.annotations.factories import AttentionCheckFactory, add_qualification, make_study
from tests.annotations.platforms.conftest import aws_env, mturk  # noqa: F401 (the stubbed MTurk client)
from tests.annotations.platforms.mturk_stubs import published_as
from tests.browser.pages import TASK_PAGE, consent_and_start, next_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = "SECRET-RATIONALE"
EVIL = "<img src=x onerror=\"window.__pwned=1\">"


def entry(live_server, study, **params) -> str:
    url = f"{live_server.url}/w/s/{handoff.study_token(study.pk)}/"
    return f"{url}?{urlencode(params)}" if params else url


def choose(page: Page, label: str, *, keyboard: bool = False) -> None:
    radio = page.locator("fieldset").last.get_by_label(label, exact=True)
    with next_page(page):
        if keyboard:
            radio.focus()
            page.keyboard.press("Space")
            page.keyboard.press("Enter")  # implicit submission of the form
        else:
            radio.check()
            page.get_by_role("button", name="Save and continue").click()


def assert_labelled(page: Page) -> None:
    unlabelled = page.evaluate(
        "Array.from(document.querySelectorAll('input:not([type=hidden])')).filter(e => !e.labels.length).length"
    )
    assert unlabelled == 0
    assert page.locator("fieldset legend").count() >= 1


def test_utility_flow_keyboard_only_with_reload_and_hidden_rationale(live_server, page: Page):
    study = make_study(n_items=3, n_sources=2, units_per_task=2, rationale_text=SECRET + " {item} {source}")
    page.goto(entry(live_server, study))
    expect(page.get_by_role("heading", name=study.name)).to_be_visible()
    page.get_by_label("I have read the above and agree to take part.").focus()
    page.evaluate("window.__sameDocument = 1")  # gone if the page were loaded anew
    page.keyboard.press("Space")
    page.keyboard.press("Tab")
    with next_page(page):
        page.keyboard.press("Enter")
    # The first question came with the consent, in place, and the address is now the task's.
    assert page.evaluate("window.__sameDocument") == 1 and TASK_PAGE.search(page.url)
    task_url = page.url
    for number in (1, 2):
        expect(page.locator("#progress-text")).to_have_text(f"Question {number} of 2")
        assert SECRET not in page.content()  # view source before the first answer
        assert_labelled(page)
        page.evaluate("window.__sameDocument = 1")  # gone if the page were loaded anew
        choose(page, "No", keyboard=True)
        expect(page.locator("#rationale")).to_contain_text(SECRET)
        expect(page.locator("#first-answer")).to_contain_text("No")
        # The reveal came with the answer, in place: no navigation, the address is the task's and
        # the keyboard starts from the page's heading.
        assert page.evaluate("window.__sameDocument") == 1 and page.url == task_url
        assert page.evaluate("document.activeElement.tagName") == "H1"
        page.reload()  # refresh mid-task: same step, the reveal stays
        expect(page.locator("#rationale")).to_contain_text(SECRET)
        choose(page, "Yes", keyboard=True)
    page.get_by_role("button", name="Finish the task").focus()
    with page.expect_navigation():  # the submit is a plain form: POST, redirect, the done page
        page.keyboard.press("Enter")
    expect(page.locator("#completion-code")).not_to_be_empty()  # the server is done with the row
    code = Assignment.objects.get().completion_code
    expect(page.locator("#completion-code")).to_have_text(code)
    assert page.url == task_url
    assert list(Annotation.objects.order_by("id").values_list("step", "answer")) == [
        ("before", "no"), ("after", "yes"), ("before", "no"), ("after", "yes")]


def test_without_javascript_the_answers_are_plain_forms(live_server, browser):
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(entry(live_server, study))
    consent_and_start(page)
    for label in ("Yes", "No", "No", "Yes"):
        page.locator("fieldset").last.get_by_label(label, exact=True).check()
        with page.expect_navigation():  # POST, redirect, GET of the task page
            page.get_by_role("button", name="Save and continue").click()
    page.get_by_role("button", name="Finish the task").click()
    expect(page.locator("#completion-code")).to_be_visible()
    assert list(Annotation.objects.order_by("id").values_list("step", "answer")) == [
        ("before", "yes"), ("after", "no"), ("before", "no"), ("after", "yes")]
    context.close()


@pytest.mark.parametrize("failure", ["network", "not a page"])
def test_when_the_scripts_request_fails_the_answer_is_posted_the_plain_way(live_server, page: Page, failure):
    study = make_study(n_items=1, n_sources=1, units_per_task=1, rationale_text=SECRET + " {item}")
    page.goto(entry(live_server, study))
    consent_and_start(page)

    def broken(route):  # the script's request only; the plain form goes through
        if route.request.headers.get("x-rl-inline") != "1":
            return route.continue_()
        if failure == "network":
            return route.abort("connectionreset")
        return route.fulfill(status=502, content_type="text/plain", body="Bad gateway")

    page.route("**/answer", broken)
    page.locator("fieldset").last.get_by_label("Yes", exact=True).check()
    with page.expect_navigation():  # the plain POST, its redirect and the task page
        page.get_by_role("button", name="Save and continue").click()
    expect(page.locator("#rationale")).to_contain_text(SECRET)
    assert list(Annotation.objects.values_list("step", "answer")) == [("before", "yes")]


def test_double_submit_and_changing_the_first_answer_are_refused(live_server, page: Page):
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    page.goto(entry(live_server, study))
    consent_and_start(page)
    task_url = page.url
    form = {name: page.locator(f"input[name={name}]").first.input_value()
            for name in ("csrfmiddlewaretoken", "claim", "step", "shown")}
    page.locator("fieldset").last.get_by_label("Yes", exact=True).check()
    sent = []
    page.on("request", lambda request: sent.append(request) if request.url.endswith("/answer") else None)
    with next_page(page):
        page.get_by_role("button", name="Save and continue").dblclick()
    page.wait_for_load_state("networkidle")  # a second request of the double click, if any, is answered
    expect(page.locator("#rationale")).to_be_visible()
    assert len(sent) == 1  # the page's script sends one answer at a time
    # The same POST replayed (dropped connection, retry) stores nothing new.
    replay = page.request.post(task_url + "answer", form={**form, "answer": "yes"}, max_redirects=0)
    assert replay.status == 302
    # Changing the first answer after the reveal, posted directly: refused by the server.
    change = page.request.post(task_url + "answer", form={**form, "answer": "no"}, max_redirects=0)
    assert change.status == 409 and "cannot be changed" in change.text()
    assert list(Annotation.objects.values_list("step", "answer")) == [("before", "yes")]
    page.reload()
    expect(page.locator("#first-answer")).to_contain_text("Yes")


def test_closing_the_browser_and_coming_back_with_the_same_link_resumes(live_server, browser):
    study = make_study(n_items=3, n_sources=1, units_per_task=2)
    context = browser.new_context()
    page = context.new_page()
    page.goto(entry(live_server, study))
    consent_and_start(page)
    choose(page, "Yes")
    task_url = page.url
    state = context.storage_state()
    context.close()
    again = browser.new_context(storage_state=state)
    page = again.new_page()
    page.goto(entry(live_server, study))  # the study link again, same browser profile
    assert page.url == task_url
    expect(page.locator("#rationale")).to_be_visible()
    again.close()
    fresh = browser.new_context().new_page()
    fresh.goto(task_url)  # the task link itself, from anywhere
    expect(fresh.locator("#first-answer")).to_contain_text("Yes")


def test_mturk_preview_then_accept_then_hand_back(live_server, page: Page, mturk):  # noqa: F811
    study = make_study(platform=Platform.MTURK, n_items=2, n_sources=1, units_per_task=1)
    published_as(mturk[1], study, "3HIT9")
    page.goto(entry(live_server, study, assignmentId=handoff.MTURK_PREVIEW_ID, hitId="3HIT9"))
    expect(page.locator("#preview-notice")).to_be_visible()
    expect(page.get_by_role("button", name="Accept the HIT to start")).to_be_disabled()
    assert not Participant.objects.exists() and not Assignment.objects.exists()
    page.goto(entry(live_server, study, assignmentId="3ASSIGN9", hitId="3HIT9", workerId="AWORKER9",
                    turkSubmitTo="https://workersandbox.mturk.com"))
    consent_and_start(page)
    choose(page, "No")
    choose(page, "No")
    page.get_by_role("button", name="Finish the task").click()
    form = page.locator("#handback-form")
    expect(form).to_have_attribute("action", "https://workersandbox.mturk.com/mturk/externalSubmit")
    expect(form.locator("input[name=assignmentId]")).to_have_value("3ASSIGN9")


def test_generalization_flow(live_server, page: Page):
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=1, units_per_task=1,
                       question_text="ORIGINAL {i}?", rationale_text=SECRET + " {item}")
    page.goto(entry(live_server, study))
    consent_and_start(page)
    expect(page.locator("legend")).to_have_text("Generalization 0 of question 0?")
    assert SECRET not in page.content() and "ORIGINAL 0?" not in page.content()
    choose(page, "Yes")
    expect(page.locator("#original-question")).to_have_text("ORIGINAL 0?")
    expect(page.locator("#rationale")).to_contain_text(SECRET)
    choose(page, "No")
    page.get_by_role("button", name="Finish the task").click()
    expect(page.locator("#completion-code")).to_be_visible()


def test_question_validation_flow(live_server, page: Page):
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=1, n_genq=1, units_per_task=1)
    page.goto(entry(live_server, study))
    consent_and_start(page)
    assert_labelled(page)
    page.locator("#well_formed-yes").check()
    page.locator("#type_correct-yes").check()
    page.locator("#answer_correct-no").check()
    with next_page(page):  # the same page again, with the reason
        page.get_by_role("button", name="Save and continue").click()
    expect(page.get_by_role("alert")).to_contain_text("corrected answer")
    page.locator("#well_formed-yes").check()
    page.locator("#type_correct-yes").check()
    page.locator("#answer_correct-no").check()
    page.locator("fieldset").last.get_by_label("No", exact=True).check()
    page.get_by_role("button", name="Save and continue").click()
    expect(page.get_by_role("button", name="Finish the task")).to_be_visible()
    assert Annotation.objects.get().payload["corrected_answer"] == "no"


def test_rationale_properties_flow_on_a_phone(live_server, browser):
    study = make_study(kind=Study.Kind.RATIONALE_PROPERTIES, n_items=1, n_sources=1, units_per_task=1,
                       rationale_text=EVIL + " {item}", question_text=EVIL + " {i}")
    context = browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(entry(live_server, study))
    consent_and_start(page)
    expect(page.locator("#rationale")).to_contain_text(EVIL)  # shown as text, not run as HTML
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert_labelled(page)
    for fieldset in page.locator("fieldset").all():
        fieldset.get_by_label("Yes").tap()
    page.get_by_role("button", name="Save and continue").tap()
    expect(page.get_by_role("button", name="Finish the task")).to_be_visible()
    assert len(Annotation.objects.get().payload) == 8
    context.close()


def test_qualification_pass_and_fail(live_server, browser):
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    AttentionCheckFactory(study=study, question="Attention: choose No")
    add_qualification(study, pass_mark=3)
    passing = browser.new_context().new_page()
    passing.goto(entry(live_server, study))
    consent_and_start(passing)
    expect(passing.get_by_role("heading", name="Qualification test")).to_be_visible()
    for i, right in enumerate(["Yes", "No", "Yes"]):
        passing.locator("fieldset").nth(i).get_by_label(right, exact=True).check()
    passing.get_by_role("button", name="Submit the test").click()
    expect(passing.locator("#progress-text")).to_have_text("Question 1 of 2")
    choose(passing, "Yes")
    choose(passing, "Yes")
    expect(passing.locator("legend")).to_have_text("Attention: choose No")
    choose(passing, "No")
    expect(passing.get_by_role("button", name="Finish the task")).to_be_visible()

    failing = browser.new_context().new_page()
    failing.goto(entry(live_server, study))
    consent_and_start(failing)
    for i in range(3):
        failing.locator("fieldset").nth(i).get_by_label("No", exact=True).check()
    failing.get_by_role("button", name="Submit the test").click()
    expect(failing.get_by_role("heading", name="Thank you for taking the test")).to_be_visible()
    assert list(QualificationGrant.objects.order_by("id").values_list("passed", flat=True)) == [True, False]
    assert sum(Unit.objects.values_list("n_claimed", flat=True)) == 1
