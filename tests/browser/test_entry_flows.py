"""The ways in, in headless Chromium, where the browser's own parsing matters: the address a hand-back
form really posts to, and the participant identifier field (its HTML pattern) across browsers."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from annotations.models import Assignment, Participant, ParticipantLink
from annotations.platforms import handoff
from annotations.services.links import links_generate
from annotations.services.platforms.access import OPERATOR
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import aws_env, mturk  # noqa: F401 (the stubbed MTurk client)
from tests.annotations.platforms.mturk_stubs import published_as
from tests.browser.pages import consent_and_start, next_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def entry(live_server, study, **params) -> str:
    url = f"{live_server.url}/w/s/{handoff.study_token(study.pk)}/"
    return f"{url}?{urlencode(params)}" if params else url


def answer_everything(page: Page) -> None:
    while page.get_by_role("button", name="Save and continue").count():
        page.locator("fieldset").last.get_by_label("Yes", exact=True).check()
        with next_page(page):
            page.get_by_role("button", name="Save and continue").click()
    page.get_by_role("button", name="Finish the task").click()
    page.wait_for_load_state()


def test_the_mturk_hand_back_posts_to_mturk_as_the_browser_reads_the_address(live_server, page: Page, mturk):  # noqa: F811
    study = make_study(platform=Platform.MTURK, n_items=1, n_sources=1, units_per_task=1)
    published_as(mturk[1], study, "3HITB")
    params = {"assignmentId": "3ASSIGNB", "hitId": "3HITB", "workerId": "AWORKERB"}
    # The address a browser reads as evil.example (issue 10 item 7) is refused at the door.
    page.goto(entry(live_server, study, **params, turkSubmitTo="https://evil.example\\@www.mturk.com"))
    expect(page.locator("#message")).to_contain_text("turkSubmitTo")
    assert not Assignment.objects.exists()
    page.goto(entry(live_server, study, **params, turkSubmitTo="https://www.mturk.com"))
    consent_and_start(page)
    answer_everything(page)
    action = page.locator("#handback-form").evaluate("form => new URL(form.action).href")
    assert action == "https://www.mturk.com/mturk/externalSubmit"


def test_a_participant_identifier_typed_in_two_browsers_is_one_person(live_server, browser):
    study = make_study(n_items=4, n_sources=2, units_per_task=2)
    laptop = browser.new_context().new_page()
    laptop.goto(entry(live_server, study))
    laptop.get_by_label("Your lab id or e-mail address", exact=False).fill("Dana.Reyes+study@lab.example")
    consent_and_start(laptop)
    answer_everything(laptop)
    expect(laptop.locator("#completion-code")).to_be_visible()

    phone = browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True).new_page()
    phone.goto(entry(live_server, study))
    phone.get_by_label("Your lab id or e-mail address", exact=False).fill("dana.reyes+study@LAB.example")
    consent_and_start(phone)
    answer_everything(phone)
    assert Participant.objects.count() == 1
    keys = list(Assignment.objects.values_list("claims__question_key", flat=True))
    assert len(keys) == 4 and len(set(keys)) == 4  # four questions, none twice, whatever the source


def test_an_old_cookie_of_a_typed_identifier_does_not_open_that_persons_task_in_another_browser(live_server, browser):
    """Issue 20 item 1: the study cookie proves the task the browser holds, not the person."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    attacker = browser.new_context().new_page()
    attacker.goto(entry(live_server, study))
    attacker.get_by_label("Your lab id or e-mail address", exact=False).fill("victim.person@lab.example")
    consent_and_start(attacker)
    answer_everything(attacker)  # done with it; the browser keeps the study cookie

    victim = browser.new_context().new_page()
    victim.goto(entry(live_server, study))
    victim.get_by_label("Your lab id or e-mail address", exact=False).fill("Victim.Person@lab.example")
    consent_and_start(victim)
    task_url = victim.url

    response = attacker.goto(entry(live_server, study))
    assert response.status == 409 and attacker.url != task_url
    expect(attacker.locator("#message")).to_contain_text("in progress")
    victim.goto(entry(live_server, study))
    assert victim.url == task_url  # the browser that started the task still holds it


def test_one_browser_on_two_single_person_links_gets_no_question_twice(live_server, browser):
    """Issue 22 item 6: the second link of one browser gives no question the first one gave, and
    the browser is one worker; another browser on a third link is a new one."""
    study = make_study(n_items=3, n_sources=1, units_per_task=2)  # a second worker must repeat one
    first, second, third = links_generate(study=study, user=OPERATOR, n=3)
    laptop = browser.new_context().new_page()
    for link in (first, second):
        laptop.goto(f"{live_server.url}/w/l/{link.token}/")
        consent_and_start(laptop)
        answer_everything(laptop)
        expect(laptop.locator("#completion-code")).to_contain_text(link.completion_code)
    tasks = {a.participant_link_id: set(a.claims.filter(unit__isnull=False).values_list("question_key", flat=True))
             for a in Assignment.objects.all()}
    assert tasks[first.pk] and tasks[second.pk] and not tasks[first.pk] & tasks[second.pk]
    assert Participant.objects.count() == 1

    other = browser.new_context().new_page()
    other.goto(f"{live_server.url}/w/l/{third.token}/")
    consent_and_start(other)
    answer_everything(other)
    assert Participant.objects.count() == 2
    assert ParticipantLink.objects.get(pk=third.pk).participant_id != ParticipantLink.objects.get(pk=first.pk).participant_id
