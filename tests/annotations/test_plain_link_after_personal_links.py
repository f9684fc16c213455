"""Once a link study has single-person links (made at any time, even if every one is withdrawn
since), its plain study link (``/w/s/<study token>/``) starts no task: the study takes part by
personal link only (``selectors.entry.plain_link_starts_tasks``). A task already started through
the plain link still opens in the browser that holds it and can be finished, its done page still
shows, and the study page's warning about anonymous entry follows the same rule."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, ConsentReceipt
from annotations.selectors.entry import plain_link_starts_tasks, study_entry_warnings
from annotations.services.links import link_revoke, links_close, links_generate, open_link_create
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, landing_form, start

pytestmark = pytest.mark.django_db

PERSONAL_ONLY = "takes part by personal link only"


@pytest.fixture
def study(db):
    return make_study(n_items=4, n_sources=1, quota=3, units_per_task=2)


def personal_links_all_withdrawn(study, n: int = 3):
    """The researcher switches to single-person links and withdraws every one of them."""
    links = links_generate(study=study, n=n, user=OPERATOR)
    for link in links:
        link_revoke(link=link, user=OPERATOR)
    return links


def assert_personal_only(response):
    assert response.status_code == 403, response.content.decode()[:500]
    assert PERSONAL_ONLY in response.content.decode()


def test_the_plain_link_starts_no_task_once_every_personal_link_is_withdrawn(study):
    assert plain_link_starts_tasks(study=study) and study_entry_warnings(study=study)
    links = personal_links_all_withdrawn(study)
    assert Client().get(f"/w/l/{links[0].token}/").status_code == 410
    assert not plain_link_starts_tasks(study=study)
    assert study_entry_warnings(study=study) == []  # nothing anonymous is admitted: no warning
    for _ in range(3):  # fresh browsers with the circulating plain link
        assert_personal_only(Client().get(entry_url(study)))
    assert not Assignment.objects.filter(study=study).exists()


def test_a_consent_form_loaded_before_the_links_were_made_starts_no_task(study):
    browser = Client()
    form = landing_form(browser, entry_url(study))  # the page was open while the researcher switched
    personal_links_all_withdrawn(study)
    assert_personal_only(browser.post(entry_url(study), form))
    assert_personal_only(browser.post(entry_url(study), {**form, "identifier": "lab-042"}))
    assert not Assignment.objects.filter(study=study).exists()
    assert not ConsentReceipt.objects.filter(study=study).exists()


def test_a_task_started_through_the_plain_link_can_still_be_finished(study):
    browser = Client()
    task = start(browser, entry_url(study))  # the pilot
    personal_links_all_withdrawn(study)
    # The browser holding it is sent back to it from the plain link, and it opens.
    response = browser.get(entry_url(study))
    assert response.status_code == 302 and response["Location"] == task
    assert browser.get(task).status_code == 200
    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302
    assert Assignment.objects.get(study=study).status == Assignment.Status.SUBMITTED
    # Its done page still shows from the plain link in that browser; another browser is refused.
    response = browser.get(entry_url(study))
    assert response.status_code == 302 and response["Location"] == task
    assert_personal_only(Client().get(entry_url(study)))
    assert Assignment.objects.filter(study=study).count() == 1


def test_a_retried_consent_form_that_gave_its_task_before_the_switch_gets_that_task(study):
    browser = Client()
    form = landing_form(browser, entry_url(study))
    first = browser.post(entry_url(study), form)
    assert first.status_code == 302
    personal_links_all_withdrawn(study)
    again = browser.post(entry_url(study), form)  # its response was lost: the same task, no new one
    assert again.status_code == 302 and again["Location"] == first["Location"]
    assert Assignment.objects.filter(study=study).count() == 1


def test_links_still_unused_close_the_plain_link_too(study):
    links = links_generate(study=study, n=2, user=OPERATOR)
    assert_personal_only(Client().get(entry_url(study)))
    # The personal links themselves work.
    task = start(Client(), f"/w/l/{links[0].token}/")
    assert Assignment.objects.get(study=study).participant_link_id == links[0].pk
    assert task.startswith("/w/a/")
    links_close(study=study, user=OPERATOR)
    assert_personal_only(Client().get(entry_url(study)))


def test_an_open_link_admits_anonymous_workers_again(study):
    personal_links_all_withdrawn(study)
    link = open_link_create(study=study, user=OPERATOR)  # the way back (publish with link mode "open")
    assert [w for w in study_entry_warnings(study=study) if "an open link" in w]
    assert start(Client(), f"/w/o/{link.token}/").startswith("/w/a/")
    assert_personal_only(Client().get(entry_url(study)))  # the plain link stays closed
    assert Assignment.objects.filter(study=study).count() == 1


def test_an_identifier_in_a_browser_holding_a_single_person_links_task_is_refused_on_an_open_link(study):
    """The plain link no longer takes a typed identifier once single-person links exist (it is
    refused before that); an open link still does, and still refuses one typed in a browser that
    holds a single-person link's task (``participant_identified_in_browser``)."""
    browser = Client()
    link = links_generate(study=study, user=OPERATOR, n=1)[0]
    open_url = f"/w/o/{open_link_create(study=study, user=OPERATOR).token}/"
    second = landing_form(browser, open_url, identifier="someone@x.org")
    start(browser, f"/w/l/{link.token}/")
    assert browser.post(open_url, second).status_code == 409
    assert_personal_only(browser.post(entry_url(study), second))
    assert Assignment.objects.filter(study=study).count() == 1
