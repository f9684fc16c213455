"""One single-person link opened in several browsers at once: each sends the consent form
together; one task is started, the link's, and every browser goes to it or is refused with a
page, never a 500 (PostgreSQL).

Before, ``participant_link_redeem`` locked the link with ``select_related("study")`` and no
``of``: PostgreSQL then locks the joined study row FOR UPDATE too, which collides with the
FOR KEY SHARE lock every other consent of the study holds on it (its inserts reference the
study), so the browsers deadlocked ("deadlock detected", a 500) and every claim in the study
waited behind a link's redemption. Now only the link's row is locked.

Run with ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_linkpub``; skipped on SQLite."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from annotations.models import Assignment, ParticipantLink
from annotations.services.links import links_generate
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import make_study
from tests.annotations.pages import landing_form

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

N_BROWSERS = 6
N_LINKS = 3


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def _consent_together(study, link) -> None:
    """``N_BROWSERS`` browsers open ``link``'s page, then send its consent form at once."""
    url = f"/w/l/{link.token}/"
    browsers = [Client(raise_request_exception=False) for _ in range(N_BROWSERS)]
    forms = [landing_form(browser, url) for browser in browsers]  # each browser has the page open
    barrier = threading.Barrier(N_BROWSERS)
    responses: list = []

    def send(browser, form):
        try:
            barrier.wait()
            response = browser.post(url, form)
            responses.append((response.status_code, response.get("Location", ""), response.content.decode()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=pair) for pair in zip(browsers, forms, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a browser hung"

    statuses = sorted(status for status, _, _ in responses)
    assert len(statuses) == N_BROWSERS and 500 not in statuses, statuses
    # One task, the link's: a browser that is not first goes to that task (the link is its
    # holder's credential while the task runs, as a later open of the link does) or is refused
    # with a page saying why; none starts a second task or gets an error.
    redeemed = ParticipantLink.objects.get(pk=link.pk)
    task = Assignment.objects.get(study=study, participant_link=link)
    assert task.participant_id == redeemed.participant_id
    assert {location for status, location, _ in responses if status == 302} == {
        reverse("annotations:assignment", args=[task.token])}, statuses
    assert all(400 <= status < 500 and "<html" in page.lower()
               for status, _, page in responses if status != 302), statuses


def test_browsers_consenting_on_one_link_at_once_start_one_task_and_get_no_500():
    study = make_study(n_items=6, n_sources=2, quota=5, units_per_task=2)
    for link in links_generate(study=study, user=OPERATOR, n=N_LINKS):  # a few rounds: a race may not show at once
        _consent_together(study, link)
    assert Assignment.objects.filter(study=study).count() == N_LINKS
