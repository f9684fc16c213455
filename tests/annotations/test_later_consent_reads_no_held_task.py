"""A platform worker's later consent, in the browser whose study cookie names their finished task,
reads that task (is it in progress, to be moved to the new platform assignment?
``services.entry.moved_task``) in the statement that reads the worker
(``selectors.entry.participant_by_platform_id``), not in a primary-key read of its own sent at every
later consent. The move itself still works from that read (``test_reaccepted_task_time``)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from annotations.models import Assignment
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, landing_form, start, task_of
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = pytest.mark.django_db


def test_a_later_consent_sends_no_read_of_the_finished_task_its_cookie_names(mturk):
    study = make_study(platform=Platform.MTURK, n_items=10, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    worker = Client()

    def url(assignment: str) -> str:
        return entry_url(study, assignmentId=assignment, hitId="3HIT", workerId="AWORKER1",
                         turkSubmitTo="https://workersandbox.mturk.com")

    first = start(worker, url("3FIRST"))
    complete_task(worker, first)
    assert worker.post(first + "submit").status_code == 302
    finished = task_of(first)
    form = landing_form(worker, url("3SECOND"))

    with CaptureQueriesContext(connection) as queries:
        response = worker.post(url("3SECOND"), form)

    assert response.status_code == 302
    assert task_of(response["Location"]).platform_assignment_id == "3SECOND"
    assert Assignment.objects.get(pk=finished.pk).status == Assignment.Status.SUBMITTED
    reads_of_finished = [q["sql"] for q in queries.captured_queries
                         if q["sql"].startswith('SELECT "annotations_assignment"')
                         and f'"annotations_assignment"."id" = {finished.pk}' in q["sql"]]
    assert reads_of_finished == []
