"""A single-person link's first use reads what the browser's study cookie proves once
(``participants._browser_participants``): the participant it proves it worked as and the one it
goes on as on the plain and open links (the withdrawn-participant check) come from the same read
of the cookie's task and its consent receipts, under the link's lock. A browser handed another
participant's task through its link (the case where both are asked) is refused nothing and
becomes the link's own participant, as before."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from annotations.models import Assignment, ParticipantLink
from annotations.services.links import links_generate
from annotations.services.platforms.access import OPERATOR
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, landing_form, start

pytestmark = pytest.mark.django_db


def link_url(link) -> str:
    return f"/w/l/{link.token}/"


def task_of(url: str) -> Assignment:
    return Assignment.objects.get(token=url.rstrip("/").rsplit("/", 1)[-1])


def test_a_handed_browsers_first_use_of_a_link_reads_its_cookies_task_once():
    study = make_study(n_items=10, n_sources=1, units_per_task=2, quota=5)
    links_generate(study=study, user=OPERATOR, n=2)
    alices, bobs_own = ParticipantLink.objects.order_by("pk")
    alice, bob = Client(), Client()
    handed = start(alice, link_url(alices))
    assert bob.get(link_url(alices))["Location"] == handed  # Bob is handed Alice's task in progress
    complete_task(bob, handed)
    assert bob.post(handed + "submit").status_code == 302
    form = landing_form(bob, link_url(bobs_own))
    task = task_of(handed)

    with CaptureQueriesContext(connection) as queries:
        response = bob.post(link_url(bobs_own), form)

    assert response.status_code == 302, response.content.decode()[:500]
    bobs_own.refresh_from_db()
    assert bobs_own.participant_id not in (None, task.participant_id)
    cookie_task_reads = [q["sql"] for q in queries.captured_queries
                         if 'FROM "annotations_assignment" INNER JOIN "annotations_participant"' in q["sql"]
                         and f'"annotations_assignment"."id" = {task.pk}' in q["sql"]]
    receipt_reads = [q["sql"] for q in queries.captured_queries
                     if 'FROM "annotations_consentreceipt"' in q["sql"]
                     and f'"assignment_id" = {task.pk}' in q["sql"]]
    assert len(cookie_task_reads) == 1, cookie_task_reads
    assert len(receipt_reads) == 1, receipt_reads
