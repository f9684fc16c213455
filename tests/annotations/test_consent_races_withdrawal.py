"""A consent racing the same worker's withdrawal stores nothing of the withdrawn worker, on
PostgreSQL (READ COMMITTED), through the landing page as a worker sends it.

The withdrawal (``withdrawal.participant_withdraw``) locks the worker's ``Participant`` row
``FOR UPDATE``, then erases their receipts and platform bindings. Before, the consent wrote its
``ConsentReceipt`` and ``PlatformAssignmentBinding`` without locking the worker (their foreign keys
take ``FOR KEY SHARE`` only at commit): it waited for the withdrawal, then committed both after
the erasure; the start that followed was refused, but the rows stayed. Now the consent locks the
worker's row before it reads or writes anything of theirs (``services.entry``), and a withdrawal
that committed meanwhile refuses it with the start's own words, leaving nothing behind.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised).
The retried form whose receipt the withdrawal erased is played on both."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from annotations.models import Assignment, ConsentReceipt, Participant, PlatformAssignmentBinding, Withdrawal
from annotations.services import entry as entry_service
from annotations.services import withdrawal as withdrawal_service
from annotations.services.participants import NOT_AVAILABLE
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url, landing_form, start
from tests.annotations.platforms.mturk_stubs import published_as
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock

WORKER = "AWITHDRAWS1"


def _mturk(assignment: str) -> dict:
    return {"assignmentId": assignment, "hitId": "3HIT", "workerId": WORKER,
            "turkSubmitTo": "https://workersandbox.mturk.com"}


def _study_the_worker_took_part_in(mturk):
    """An MTurk study the worker started a task of and returned (nothing owed: the withdrawal
    goes through), and the consent form of their next assignment, loaded before the withdrawal."""
    study = make_study(platform=Platform.MTURK, n_items=6, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT", "3OTHER")
    browser = Client()
    first = start(browser, entry_url(study, **_mturk("3FIRSTASSIGN")))
    assert browser.post(first + "leave").status_code == 302  # returned: the place goes back, nothing owed
    url = entry_url(study, **_mturk("3NEXTASSIGN"))
    return study, browser, url, landing_form(browser, url)


def _withdraw(study):
    return participant_withdraw(user=OPERATOR, study=study, pseudonym=worker_pseudonym(Platform.MTURK, WORKER))


def _assert_nothing_stored_and_refused(study, response):
    # Their row (and raw id) went with the withdrawal: nothing else named it.
    assert not Participant.objects.filter(platform=Platform.MTURK, external_id=WORKER).exists()
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not ConsentReceipt.objects.exists() and not PlatformAssignmentBinding.objects.exists()
    assert not Assignment.objects.filter(study=study).exclude(status=Assignment.Status.WITHDRAWN).exists()
    text = response.content.decode()
    assert response.status_code == 403 and NOT_AVAILABLE in text, (response.status_code, text[:500])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_consent_while_the_withdrawal_holds_the_worker_waits_and_stores_nothing(mturk, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    study, browser, url, form = _study_the_worker_took_part_in(mturk)
    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: _withdraw(study))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the worker's row FOR UPDATE, not yet committed
    consented = Step(lambda: browser.post(url, form))
    consented.start()
    try:
        assert waits_on_a_lock(consented), "the consent did not wait for the withdrawal"
    finally:
        release.set()
    assert withdrawal.outcome().created
    _assert_nothing_stored_and_refused(study, consented.outcome())


@pytest.mark.django_db(transaction=True)
def test_a_form_sent_again_after_the_withdrawal_erased_its_receipt_is_refused_not_failed(mturk, monkeypatch):
    """The form's first sending was refused (the worker's task was in progress in another browser)
    and left its receipt; the withdrawal erases that receipt while the form, sent again, has read it
    and is about to decide: the form is refused as a withdrawn worker's, not a server error."""
    study = make_study(platform=Platform.MTURK, n_items=6, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT", "3OTHER")
    browser = Client()
    url = entry_url(study, **_mturk("3NEXTASSIGN"))
    form = landing_form(browser, url)
    start(Client(), entry_url(study, **_mturk("3FIRSTASSIGN")))  # in progress elsewhere: nothing owed
    refused = browser.post(url, form)
    assert refused.status_code == 409, refused.content.decode()[:500]
    assert ConsentReceipt.objects.filter(assignment__isnull=True).count() == 1  # the refused form's
    decide = entry_service._consent_decide

    def withdrawn_meanwhile(**kwargs):  # the receipt was read; the withdrawal commits before the decision
        assert _withdraw(study).created
        return decide(**kwargs)

    monkeypatch.setattr(entry_service, "_consent_decide", withdrawn_meanwhile)
    _assert_nothing_stored_and_refused(study, browser.post(url, form))
