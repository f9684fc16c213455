"""The consent on record is the consent the worker agreed to: the landing page's form carries the
SHA-256 of the consent text it shows, the consent's receipt records it, and a form that agreed to
another text than the study's takes nothing (``annotations.services.entry.consent_take``). Through
the pages (Django's test client) and the service."""
from __future__ import annotations

import hashlib
import html

import pytest
from django.test import Client

from annotations.models import Assignment, ConsentReceipt, Participant, PlatformAssignmentBinding
from annotations.services.entry import PlatformRefs, consent_take, consent_text_sha256
from annotations.services.errors import ConsentChanged
from studies.models import Platform, Study
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.pages import FIELD, entry_url, landing_form
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = pytest.mark.django_db

# Markup, an apostrophe, a line break and non-ASCII: the page escapes them, the hash is of the text.
CONSENT = "Je suis d'accord <b>pour participer</b>.\nMes réponses — anonymes — servent à la recherche."
MTURK = {"assignmentId": "3ASSIGN1", "hitId": "3HIT", "workerId": "AWORKER1",
         "turkSubmitTo": "https://workersandbox.mturk.com"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def nothing_made() -> bool:
    return not (Participant.objects.exists() or Assignment.objects.exists() or ConsentReceipt.objects.exists()
                or PlatformAssignmentBinding.objects.exists())


@pytest.fixture(params=["plain link", "mturk"])
def way_in(request):
    """An open study with ``CONSENT``, and the address a worker enters it by."""
    mturk = request.param == "mturk"
    study = make_study(platform=Platform.MTURK if mturk else Platform.LINK, n_items=6, n_sources=1,
                       units_per_task=2, consent_text=CONSENT)
    if mturk:  # workers enter through one of the study's HITs
        published_as(request.getfixturevalue("mturk")[1], study, MTURK["hitId"])
    return study, entry_url(study, **(MTURK if mturk else {}))


def test_the_receipt_records_the_hash_of_the_consent_text_the_page_showed(way_in):
    study, url = way_in
    browser = Client()
    form = landing_form(browser, url)
    assert form["consent_sha256"] == sha256(CONSENT)
    response = browser.post(url, form)
    assert response.status_code == 302
    receipt = ConsentReceipt.objects.get()
    assert receipt.consent_sha256 == sha256(CONSENT) == sha256(Study.objects.get(pk=study.pk).consent_text)
    assert receipt.assignment == Assignment.objects.get()


@pytest.mark.parametrize("value", [
    None,                                   # a page loaded before the field existed
    "",
    sha256(CONSENT).upper(),                # hexadecimal, but not lowercase
    sha256(CONSENT)[:63],
    sha256(CONSENT) + "0",
    sha256(CONSENT) + "\n",
    " " + sha256(CONSENT),
    "g" * 64,
    "<script>alert(1)</script>",
], ids=["missing", "empty", "uppercase", "63 digits", "65 digits", "newline", "space", "not hex", "markup"])
def test_a_consent_hash_outside_its_format_is_refused_with_the_consent_shown_again(way_in, value):
    study, url = way_in
    browser = Client()
    form = landing_form(browser, url)
    if value is None:
        del form["consent_sha256"]
    else:
        form["consent_sha256"] = value
    response = browser.post(url, form)
    assert response.status_code == 400
    page = response.content.decode()
    assert "consent_sha256" in page and 'role="alert"' in page
    assert nothing_made()
    # The page is the landing page again, with a fresh form for the consent as it reads: it works.
    assert 'id="consent-text"' in page and "&lt;b&gt;pour participer&lt;/b&gt;" in page
    again = {"consent": "yes", **{name: html.unescape(FIELD[name].search(page).group(1))
                                  for name in ("nonce", "consent_sha256")}}
    assert again["consent_sha256"] == sha256(CONSENT)
    assert browser.post(url, again).status_code == 302
    assert ConsentReceipt.objects.get().consent_sha256 == sha256(CONSENT)


def test_a_form_that_agreed_to_another_text_takes_nothing_and_shows_the_consent_as_it_reads(way_in):
    study, url = way_in
    browser = Client()
    form = {**landing_form(browser, url), "consent_sha256": sha256("I agree to something else.")}
    response = browser.post(url, form)
    assert response.status_code == 409
    page = response.content.decode()
    assert "not the one your page showed" in page and 'id="consent-text"' in page
    assert nothing_made()
    again = {"consent": "yes", **{name: html.unescape(FIELD[name].search(page).group(1))
                                  for name in ("nonce", "consent_sha256")}}
    assert browser.post(url, again).status_code == 302
    assert ConsentReceipt.objects.get().consent_sha256 == sha256(CONSENT)


def test_a_page_loaded_before_the_consent_changed_is_refused_after_it():
    """The service refuses a change to an open study's consent (``study_update``); a write around it
    (here, an UPDATE of the row) still cannot make a page's consent count for another text."""
    study = make_study(n_items=4, n_sources=1, units_per_task=2, consent_text=CONSENT)
    url = entry_url(study)
    browser = Client()
    form = landing_form(browser, url)
    Study.objects.filter(pk=study.pk).update(consent_text="New terms, agreed by nobody yet.")
    response = browser.post(url, form)
    assert response.status_code == 409 and "New terms, agreed by nobody yet." in response.content.decode()
    assert nothing_made()
    assert browser.post(url, landing_form(browser, url)).status_code == 302
    assert ConsentReceipt.objects.get().consent_sha256 == sha256("New terms, agreed by nobody yet.")


def test_a_retried_form_gets_its_task_and_keeps_the_hash_it_agreed_to():
    study = make_study(n_items=6, n_sources=1, units_per_task=2, consent_text=CONSENT)
    url = entry_url(study)
    browser = Client()
    form = landing_form(browser, url)
    first = browser.post(url, form)
    # The response was lost (no study cookie yet) and the same form is sent again: the same task,
    # even after a write around the service changed the text, since this form was already taken.
    for text in (CONSENT, "Changed afterwards."):
        Study.objects.filter(pk=study.pk).update(consent_text=text)
        del browser.cookies[f"rl_w{study.pk}"]
        retry = browser.post(url, form)
        assert retry.status_code == 302 and retry["Location"] == first["Location"]
    assert Participant.objects.count() == 1 and Assignment.objects.count() == 1
    assert ConsentReceipt.objects.get().consent_sha256 == sha256(CONSENT)


# --- the service -----------------------------------------------------------------------------------

def test_the_consent_service_refuses_another_texts_hash_before_it_makes_anyone():
    study = make_study(n_items=4, n_sources=1, units_per_task=2, consent_text=CONSENT)
    asked = []

    def participant():
        asked.append(1)
        return ParticipantFactory()

    with pytest.raises(ConsentChanged):
        consent_take(key="n" * 32, study=study, consent_sha256=sha256(CONSENT + " "), participant=participant,
                     refs=PlatformRefs(), held_task_id=None)
    assert not asked and nothing_made()
    task = consent_take(key="n" * 32, study=study, consent_sha256=sha256(CONSENT), participant=participant,
                        refs=PlatformRefs(), held_task_id=None)
    assert asked == [1]
    assert ConsentReceipt.objects.get(key="n" * 32).consent_sha256 == sha256(CONSENT)
    assert ConsentReceipt.objects.get().assignment == task


def test_the_consent_hash_is_of_the_stored_text_in_utf8():
    study = make_study(n_items=2, n_sources=1, units_per_task=2, consent_text=CONSENT)
    assert consent_text_sha256(study) == sha256(CONSENT)
    digest = consent_text_sha256(study)
    assert len(digest) == 64 and digest == digest.lower()
