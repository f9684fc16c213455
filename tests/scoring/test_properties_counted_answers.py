"""A rationale-properties study's report says which answers count, as the other kinds' sections do
(``counted_note`` in ``properties_section``), and its warnings point to no other reading of the
counted answers: a properties study has none (its model is not refitted per reading), so
``counted_answers.other_readings`` is absent and a warning naming it would send the reader nowhere.
Built through the pages and services: the utility study is answered through ``tests.work``, the
properties study through the questionnaire pages, the owner blocks the worker (``worker_block``)."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Assignment
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.blocks import worker_block
from scoring.models import ScoreRun
from scoring.reports.sections import properties_section
from scoring.services import study_score
from studies.models import Study
from studies.services.studies import study_create
from tests.api.conftest import grant
from tests.scoring.test_properties_study_scored import N_ITEMS, _answer_properties_through_the_pages, _useful
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def test_a_properties_study_says_which_answers_count_and_points_to_no_missing_reading(settings):
    settings.RL_SCORING_SIMILARITY = False
    owner = grant(get_user_model().objects.create_user(username="olga", password="pw", is_staff=True),
                  "studies.view_study", "studies.change_study", "studies.pay_workers")
    utility = open_utility_study(name="lender", n_items=N_ITEMS, n_sources=1, quota=1, owner=owner)
    work(utility, "w1", answer=lambda claim, step: (
        ("no", "yes") if _useful(claim.unit.item) else ("yes", "no"))[step == "after"])
    assert study_score(study=utility).status == ScoreRun.Status.DONE
    props = study_open(study=study_create(
        name="props", dataset=utility.dataset, kind=Study.Kind.RATIONALE_PROPERTIES, sources=utility.sources.all(),
        annotators_per_unit=1, units_per_task=N_ITEMS, owner=owner, consent_text="I agree."), user=OPERATOR)
    _answer_properties_through_the_pages(props)  # answered at once on each page: a speeding task
    (task,) = Assignment.objects.filter(study=props)
    worker_block(user=owner, study=props, participant=task.participant, reason="Copied answers.")

    run = study_score(study=props)

    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    counted = run.results["counted_answers"]
    assert "other_readings" not in counted  # the properties model is not refitted per reading
    speeding = next(w for w in run.results["warnings"] if "faster than a person reads" in w)
    assert speeding.endswith("they count in the figures."), speeding
    assert "other_readings" not in json.dumps(run.results["warnings"])
    notes = " ".join(properties_section(run.results).notes)
    assert "Counted: 0 approved tasks and 1 submitted but not yet reviewed" in notes
    # what else the figures count: the speeding task and the blocked worker's
    assert counted["tasks_speeding"] == 1 and counted["tasks_of_blocked_workers"] == 1
    blocked = next(w for w in run.results["warnings"] if "workers blocked" in w)
    assert blocked.endswith("Reject the work if it should not count.")
    assert "Counted as well: 1 tasks of workers blocked in this study" in notes and "1 speeding tasks" in notes
