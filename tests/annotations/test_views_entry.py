"""The ways in, attacked as a crowdworker would (issue 10): hostile URL parameters, someone else's
worker id, lost consent responses, open links across browsers. Through the HTTP pages."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment, ConsentReceipt, Participant, PlatformAssignmentBinding
from annotations.platforms import handoff
from annotations.services.assignment import assignment_start
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, consent, entry_url, landing_form, landing_nonce, start
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = pytest.mark.django_db

SANDBOX = "https://workersandbox.mturk.com"


def mturk(worker: str = "AVICTIM1", assignment: str = "3VICTIMASSIGN", hit: str = "3HIT", submit_to: str = SANDBOX):
    return {"assignmentId": assignment, "hitId": hit, "workerId": worker, "turkSubmitTo": submit_to}


@pytest.fixture
def mturk_study(db, mturk):
    """An open MTurk study published as HITs 3HIT and 3OTHER, the ones its workers enter with."""
    study = make_study(platform=Platform.MTURK, n_items=6, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT", "3OTHER")
    return study


# --- item 1: every platform parameter has its documented format ----------------------------------

@pytest.mark.parametrize("name, value", [
    ("workerId", "w1"),                      # lowercase: not an MTurk id
    ("workerId", "BWORKER"),                 # worker ids start with A
    ("workerId", "A" * 65),                  # longer than 64
    ("workerId", " AVICTIM1"),
    ("workerId", "AW,0.99\nAW"),             # a CSV row smuggled in
    ("workerId", ""),
    ("assignmentId", "3ASSIGN-1"),
    ("assignmentId", "3ASSIGN\r\n"),
    ("assignmentId", ""),
    ("hitId", "<script>"),
    ("hitId", ""),
])
def test_mturk_parameters_outside_their_documented_format_are_refused(client, mturk_study, name, value):
    url = entry_url(mturk_study, **{**mturk(), name: value})
    for response in (client.get(url), client.post(url, {"consent": "yes"})):
        assert response.status_code == 400
        assert name in response.content.decode()
    assert not Participant.objects.exists() and not Assignment.objects.exists()


def test_the_validated_mturk_values_are_what_is_stored(client, mturk_study):
    start(client, entry_url(mturk_study, **mturk(submit_to=SANDBOX + "/")))
    assignment = Assignment.objects.select_related("participant").get()
    assert assignment.participant.external_id == "AVICTIM1"
    assert (assignment.platform_assignment_id, assignment.platform_task_id, assignment.return_url) == (
        "3VICTIMASSIGN", "3HIT", SANDBOX)


# --- item 7: turkSubmitTo only chooses among fixed addresses ---------------------------------------

@pytest.mark.parametrize("submit_to", [
    "https://evil.example\\@www.mturk.com",
    "https://evil.example\\@workersandbox.mturk.com",
    "https://www.mturk.com.evil.example",
    "https://www.mturk.com@evil.example",
    "http://www.mturk.com",
    "//www.mturk.com",
    "javascript:alert(1)//www.mturk.com",
])
def test_turk_submit_to_outside_the_allow_list_is_refused(client, mturk_study, submit_to):
    response = client.post(entry_url(mturk_study, **mturk(submit_to=submit_to)), {"consent": "yes"})
    assert response.status_code == 400 and "turkSubmitTo" in response.content.decode()
    assert not Assignment.objects.exists()


def test_the_hand_back_form_action_is_never_built_from_stored_text(mturk_study):
    participant = Participant.objects.create(platform=Platform.MTURK, external_id="AOLDROW")
    # A row stored before the entry checked turkSubmitTo (or edited in the database).
    assignment = assignment_start(study=mturk_study, participant=participant, platform_assignment_id="3OLD",
                                  return_url="https://evil.example\\@www.mturk.com", consented=True)
    handback = handoff.handback_for(assignment)
    assert handback.kind == "code" and "evil" not in handback.url
    assignment.return_url = "https://www.mturk.com"
    assert handoff.handback_for(assignment).url == "https://www.mturk.com/mturk/externalSubmit"


# --- item 5 (impersonation): ids from the URL never hand out someone's task ------------------------

def test_a_victims_worker_id_with_another_assignment_id_does_not_open_the_victims_task(mturk_study):
    victim = Client()
    task = start(victim, entry_url(mturk_study, **mturk()))
    attacker = Client()
    for url in (entry_url(mturk_study, **mturk(assignment="3FORGED")), entry_url(mturk_study, **mturk(assignment="3FORGED", hit="3OTHER"))):
        response = attacker.get(url)
        assert response.status_code == 409 and "in progress" in response.content.decode()
        assert task not in response.content.decode() and "Location" not in response


def test_a_consent_post_cannot_take_over_or_rewrite_a_victims_task(mturk_study):
    attacker = Client()
    forged = entry_url(mturk_study, **mturk(assignment="3FORGED", submit_to="https://www.mturk.com"))
    form = landing_form(attacker, forged)  # loaded before the victim arrives
    victim = Client()
    task = start(victim, entry_url(mturk_study, **mturk()))
    response = attacker.post(forged, form)
    assert response.status_code == 409 and task not in response.content.decode()
    assignment = Assignment.objects.get()
    assert (assignment.platform_assignment_id, assignment.return_url) == ("3VICTIMASSIGN", SANDBOX)
    assert Assignment.objects.count() == 1


def test_an_assignment_id_belongs_to_the_first_worker_seen_with_it(mturk_study):
    start(Client(), entry_url(mturk_study, **mturk()))
    attacker = Client()
    url = entry_url(mturk_study, **mturk(worker="AATTACKER"))  # the victim's assignmentId, another worker
    for response in (attacker.get(url), attacker.post(url, {"consent": "yes"})):
        assert response.status_code == 403 and "another worker" in response.content.decode()
    assert not Participant.objects.filter(external_id="AATTACKER").exists()
    assert Assignment.objects.count() == 1
    assert PlatformAssignmentBinding.objects.get().participant.external_id == "AVICTIM1"


def test_the_same_worker_resumes_from_a_new_browser_only_with_the_bound_assignment_id(mturk_study):
    task = start(Client(), entry_url(mturk_study, **mturk()))
    other_browser = Client()
    again = other_browser.get(entry_url(mturk_study, **mturk()))
    assert again.status_code == 302 and again["Location"] == task


def test_returning_and_accepting_again_in_the_same_browser_moves_the_task_to_the_new_assignment(client, mturk_study):
    task = start(client, entry_url(mturk_study, **mturk()))
    url = entry_url(mturk_study, **mturk(assignment="3SECONDACCEPT"))
    assert client.get(url).status_code == 200  # the landing page: consenting again moves it
    assert start(client, url) == task
    assignment = Assignment.objects.get()
    assert assignment.platform_assignment_id == "3SECONDACCEPT"
    assert PlatformAssignmentBinding.objects.filter(participant=assignment.participant).count() == 2


# --- item 12: consent is taken once --------------------------------------------------------------

@pytest.mark.parametrize("platform_params", [{}, mturk()], ids=["plain link", "mturk"])
def test_a_retried_consent_form_gets_the_same_participant_and_task(platform_params, request):
    study = make_study(platform=Platform.MTURK if platform_params else Platform.LINK, n_items=6, n_sources=1,
                       units_per_task=2)
    if platform_params:
        published_as(request.getfixturevalue("mturk")[1], study, "3HIT")
    url = entry_url(study, **platform_params)
    browser = Client()
    form = landing_form(browser, url)
    first = browser.post(url, form)
    for _ in range(2):
        # The response was lost: the browser never got the study cookie and sends the same form again.
        del browser.cookies[f"rl_w{study.pk}"]
        retry = browser.post(url, form)
        assert retry.status_code == 302 and retry["Location"] == first["Location"]
    assert Participant.objects.count() == 1 and Assignment.objects.count() == 1
    assert ConsentReceipt.objects.get().assignment == Assignment.objects.get()


def test_a_consent_form_without_its_landing_pages_nonce_is_refused():
    study, other = make_study(), make_study()
    browser = Client()
    foreign = landing_nonce(browser, entry_url(other))
    for form in ({"consent": "yes"}, {"consent": "yes", "nonce": foreign}, {"consent": "yes", "nonce": "1:x:y"}):
        response = browser.post(entry_url(study), form)
        assert response.status_code == 400 and "start again" in response.content.decode()
    assert not Participant.objects.exists()


# --- item 6: a participant identifier on open links --------------------------------------------------

def test_an_identifier_keeps_each_question_once_per_person_across_browsers():
    study = make_study(n_items=4, n_sources=2, units_per_task=2)
    laptop = Client()
    task = start(laptop, entry_url(study), identifier="Ana.Lopez@Lab.example")
    complete_task(laptop, task)
    assert laptop.post(task + "submit").status_code == 302
    phone = Client()
    second = start(phone, entry_url(study), identifier="  ana.lopez@lab.example ")
    assert second != task
    participant = Participant.objects.get()
    assert "ana" not in participant.external_id and participant.external_id.startswith("idh-")
    keys = list(Assignment.objects.values_list("claims__question_key", flat=True))
    assert len(keys) == 4 and len(set(keys)) == 4  # no question twice, whatever the source


def test_an_identifier_does_not_open_the_task_of_another_browser():
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    task = start(Client(), entry_url(study), identifier="lab-042")
    response = consent(Client(), entry_url(study), identifier="LAB-042")
    assert response.status_code == 409 and task not in response.content.decode()


@pytest.mark.parametrize("identifier", ["<b>", "a b", "x" * 255, "name;drop"])
def test_a_malformed_identifier_is_refused_with_the_format(client, identifier):
    study = make_study()
    response = consent(client, entry_url(study), identifier=identifier)
    assert response.status_code == 400 and "lab id or an e-mail" in response.content.decode()
    assert not Participant.objects.exists()


def test_the_landing_page_of_anonymous_links_offers_the_identifier(client, mturk_study):
    assert 'name="identifier"' in client.get(entry_url(make_study())).content.decode()
    assert 'name="identifier"' not in client.get(entry_url(mturk_study, **mturk())).content.decode()
