"""The cockpit pages say what their numbers count, next to them: the workers page counts every answer
of a worker in the study (a reviewer wants them all), unlike scoring, which reads only the answers
that count (``claims_that_count``); the progress page's "answers that count" names every condition of
that rule, work on hold included; the study form says in which currency pay is."""
from __future__ import annotations

import re

import pytest

from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

WORKERS_RULE = ("counted over all their answers in this study, including tasks not submitted, rejected, returned, "
                "expired or on hold; scoring reads only the answers that count. Seconds a question: the median over "
                "questions answered in full.")
PROGRESS_RULE = ("submitted the task (and the task was not rejected, returned or expired, and not on hold (sync found "
                 "the platform's worker or listing did not match) until a researcher clears it).")


def _text(html: str) -> str:
    """The page's text with its whitespace folded, as a reader sees it."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_workers_page_says_it_counts_every_answer_scoring_does_not(dana):
    user, client = dana
    study = open_utility_study(name="named-workers", n_items=2, n_sources=2, quota=2, units_per_task=2, owner=user)
    work(study, "PID-done")  # submitted: its answers count
    work(study, "PID-away", steps=3, submit=False)  # still working: its answers do not count yet

    response = client.get(f"/admin/studies/study/{study.pk}/workers/")
    assert response.status_code == 200
    # The page counts the unsubmitted worker's answers too ...
    assert all(record.answers > 0 for record in response.context["workers"])
    assert len(response.context["workers"]) == 2
    # ... and says so, beside the rule scoring reads.
    assert WORKERS_RULE in _text(response.content.decode())


def test_the_progress_page_names_work_on_hold(dana):
    user, client = dana
    study = open_utility_study(name="named-progress", n_items=2, n_sources=2, quota=2, units_per_task=2, owner=user)
    response = client.get(f"/admin/studies/study/{study.pk}/progress/")
    assert response.status_code == 200
    assert PROGRESS_RULE in _text(response.content.decode())


def test_the_study_form_says_pay_is_in_the_platforms_currency(dana):
    """Reward and pay floor are sent to Prolific in RL_PROLIFIC_CURRENCY, not always USD: the study
    form's help says so."""
    _, client = dana
    response = client.get("/admin/studies/study/add/")
    assert response.status_code == 200
    text = _text(response.content.decode())
    assert "Base pay per task, in the platform's currency (Prolific: the RL_PROLIFIC_CURRENCY setting; MTurk: USD)." \
           in text
    assert ("Minimum effective hourly pay, in the platform's currency (Prolific: the RL_PROLIFIC_CURRENCY setting; "
            "MTurk: USD).") in text
    assert "(USD)." not in text
