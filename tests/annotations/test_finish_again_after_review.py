"""A Finish sent again after the researcher reviewed the task (a response lost on the network, or
a finish page still open in a second tab while "Approve all" ran) gets the done page, with the
completion code, as a Finish sent again before the review does: the task was handed in and stored
(``services.answers.assignment_submit``, ``selectors.DONE_STATUSES``), never "Not saved"."""
from __future__ import annotations

import pytest
from django.test import Client

from annotations.models import Assignment
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve, assignment_reject
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, start, task_of

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("review", ["approve", "reject"])
def test_a_finish_sent_again_after_the_review_gets_the_done_page(review):
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    browser = Client()
    task = start(browser, entry_url(study), identifier="lab-1")
    complete_task(browser, task)
    first = browser.post(task + "submit", follow=True)
    assert first.status_code == 200
    assignment = task_of(task)
    code = assignment.completion_code
    assert code and code in first.content.decode()
    if review == "approve":
        assignment_approve(user=OPERATOR, study=study, assignment=assignment)
    else:
        assignment_reject(user=OPERATOR, study=study, assignment=assignment, feedback="Answers at random.")

    again = browser.post(task + "submit", follow=True)

    assert again.status_code == 200, again.content.decode()[:500]
    page = again.content.decode()
    assert "Not saved" not in page and code in page
    assert Assignment.objects.get(pk=assignment.pk).status == (
        Assignment.Status.APPROVED if review == "approve" else Assignment.Status.REJECTED)
