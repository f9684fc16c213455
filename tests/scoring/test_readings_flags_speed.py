"""Two choices of which answers count that the published figures make silently unless named: the
answers of units whose question or explanation a researcher accepted a flag on, and the answers
of tasks done faster than a person reads (speeders). Both count (the published figures stay as
they were); ``counted_answers`` names the rule and the counts, and its other readings give the
figures without them, in results.json, the report and the API alike. Built through the services:
workers answer through the questionnaire (``tests.work``), the researcher accepts flags through
``flag_accept``."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from annotations.models import Annotation
from annotations.selectors.cost import MIN_PLAUSIBLE_SECONDS_PER_QUESTION
from annotations.selectors.review import SECONDS_PER_QUESTION_RULE, study_workers, task_seconds_per_question
from annotations.services.flags import flag_accept, flag_dismiss
from annotations.services.platforms.access import OPERATOR
from scoring.reports.sections import utility_section
from scoring.services import study_score
from studies.api.tokens import api_token_create
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

FLAG = {"flag": True, "flag_note": "gold answer is wrong"}


def _item(claim) -> str:
    return claim.unit.item.external_id


# --- accepted flags ------------------------------------------------------------------------------


def test_units_with_an_accepted_flag_on_the_question_are_counted_named_and_left_out_by_the_other_reading():
    """Every worker flags the first question ('gold answer is wrong') before seeing the explanation;
    the researcher accepts every flag. The flag is about the question, so both sources' units of that
    item are concerned: the published figures still count them, counted_answers says how many, and
    the other reading gives the figures without them."""
    owner = get_user_model().objects.create_user(username="flag-owner", password="pw-flag-owner")
    study = open_utility_study(name="flagged", n_items=2, n_sources=2, quota=3, gold="yes", owner=owner)
    flagged_item = "flagged-q0"

    def answer(claim, step):  # the flagged item: useful; the other: right before and after (unsure)
        return "no" if (step == "before" and _item(claim) == flagged_item) else "yes"

    def payload(claim, step):
        return FLAG if (step == "before" and _item(claim) == flagged_item) else None

    for i in range(6):
        work(study, f"F{i:023d}", answer=answer, payload=payload)
    flags = Annotation.objects.filter(claim__study=study, payload__flag=True)
    assert flags.count() == 6
    for flagged in flags:
        flag_accept(annotation=flagged, user=OPERATOR)

    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    # the published figures are unchanged: both items' units count
    assert run.results["utility_shares"]["all"]["useful"] == 0.5 and run.results["n_units_scored"] == 4
    counted = run.results["counted_answers"]
    assert counted["flags_accepted"] == 6
    assert counted["units_with_accepted_flags"] == 2  # the item under both sources
    assert counted["answers_in_units_with_accepted_flags"] == 12  # 6 questions x before and after
    assert "before the explanation was shown, so it is about the question" in counted["accepted_flag_rule"]
    reading = counted["other_readings"]["without_units_with_accepted_flags"]
    assert reading["answers_left_out"] == 12 and reading["n_answers"] == 12
    assert reading["n_units_scored"] == 2 and reading["identical_to"] is None
    assert reading["utility_shares"]["all"]["useful"] == 0.0 and reading["utility_shares"]["all"]["unsure"] == 1.0
    assert "every unit asking that question" in reading["rule"]
    assert any("12 counted answers are in 2 units" in w and "without_units_with_accepted_flags" in w
               for w in run.results["warnings"])
    # the report prints the reading, and the API serves it as results.json has it
    notes = " ".join(utility_section(run.results).notes)
    assert "Other reading, without the units a researcher accepted a flag on: 12 answers left out, 2 units scored; useful 0.000" in notes
    _, key = api_token_create(user=owner, name="test", read_only=True, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    body = client.get(f"/api/v1/studies/{study.pk}/results/").json()
    assert body["counted_answers"]["other_readings"]["without_units_with_accepted_flags"] == reading
    assert body["counted_answers"]["units_with_accepted_flags"] == 2


def test_an_accepted_flag_on_the_explanation_concerns_its_own_unit_and_a_dismissed_one_none():
    """A flag given after the explanation was shown may be about the explanation: only its unit
    (item and source) is left out by the reading. A dismissed flag is no problem: nothing changes."""
    study = open_utility_study(name="explained", n_items=1, n_sources=2, quota=2, gold="yes")
    flagged_source = "explained-s0"

    def payload(claim, step):
        return FLAG if step == "after" else None

    for i in range(4):
        work(study, f"E{i:023d}", payload=payload)
    flags = Annotation.objects.filter(claim__study=study, payload__flag=True).select_related("claim__unit__source")
    for flagged in flags:
        if flagged.claim.unit.source.name == flagged_source:
            flag_accept(annotation=flagged, user=OPERATOR)
        else:
            flag_dismiss(annotation=flagged, user=OPERATOR)

    run = study_score(study=study, similarity=False)
    counted = run.results["counted_answers"]
    assert (counted["flags_accepted"], counted["units_with_accepted_flags"]) == (2, 1)
    assert counted["answers_in_units_with_accepted_flags"] == 4
    reading = counted["other_readings"]["without_units_with_accepted_flags"]
    assert reading["answers_left_out"] == 4 and reading["n_units_scored"] == 1
    assert list(reading["utility_shares"]) == ["explained-s1", "all"]


def test_no_accepted_flag_leaves_every_answer_and_says_so():
    study = open_utility_study(name="unflagged", n_items=1, n_sources=1, quota=2, gold="yes")
    for i in range(2):
        work(study, f"U{i:023d}", payload=lambda claim, step: FLAG if step == "before" else None)
    for flagged in Annotation.objects.filter(claim__study=study, payload__flag=True):
        flag_dismiss(annotation=flagged, user=OPERATOR)  # reviewed, not a real problem
    run = study_score(study=study, similarity=False)
    counted = run.results["counted_answers"]
    assert (counted["flags_accepted"], counted["units_with_accepted_flags"],
            counted["answers_in_units_with_accepted_flags"]) == (0, 0, 0)
    reading = counted["other_readings"]["without_units_with_accepted_flags"]
    assert reading["identical_to"] == "published" and reading["answers_left_out"] == 0
    assert not any("accepted a flag" in w for w in run.results["warnings"])


# --- speeders ------------------------------------------------------------------------------------


def test_speeding_tasks_count_are_named_and_left_out_by_the_other_reading():
    """Three workers take 0.3 s a step (0.6 s a question, under the threshold), three take 2.5 s a
    step (5 s a question: at the threshold, not under it) and one is untimed. The published figures
    count them all; counted_answers names the threshold, how time is measured and the counts; the
    other reading gives the figures without the speeders."""
    study = open_utility_study(name="speedy", n_items=2, n_sources=1, quota=7, gold="yes")
    speeders = [work(study, f"S{i:023d}", answer=lambda c, s: "no" if s == "before" else "yes", shown_for=0.3)
                for i in range(3)]
    careful = [work(study, f"C{i:023d}", answer=lambda c, s: "yes", shown_for=2.5) for i in range(3)]
    work(study, f"N{0:023d}", answer=lambda c, s: "no" if s == "before" else "yes")  # untimed

    pace = task_seconds_per_question(tasks=study.assignments.all())
    assert all(pace[t.pk] < MIN_PLAUSIBLE_SECONDS_PER_QUESTION for t in speeders)
    assert all(pace[t.pk] >= MIN_PLAUSIBLE_SECONDS_PER_QUESTION for t in careful)
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    # published: before 4 "no" of 7 (wrong), after all "yes": useful, speeders included
    assert run.results["utility_shares"]["all"]["useful"] == 1.0
    counted = run.results["counted_answers"]
    assert (counted["tasks_speeding"], counted["answers_speeding"], counted["tasks_untimed"]) == (3, 12, 1)
    assert counted["speeder_threshold_seconds_per_question"] == MIN_PLAUSIBLE_SECONDS_PER_QUESTION
    rule = counted["speeder_rule"]
    assert f"below {MIN_PLAUSIBLE_SECONDS_PER_QUESTION:g}" in rule and "MIN_PLAUSIBLE_SECONDS_PER_QUESTION" in rule
    assert SECONDS_PER_QUESTION_RULE in rule
    reading = counted["other_readings"]["without_speeding_tasks"]
    assert reading["answers_left_out"] == 12 and reading["n_answers"] == 16
    assert reading["utility_shares"]["all"]["useful"] == 0.0 and reading["utility_shares"]["all"]["unsure"] == 1.0
    assert SECONDS_PER_QUESTION_RULE in reading["rule"]
    assert any("3 counted tasks (12 answers) took under" in w and "without_speeding_tasks" in w
               for w in run.results["warnings"])
    assert "Other reading, without the speeding tasks: 12 answers left out" in " ".join(utility_section(run.results).notes)


def test_a_task_is_timed_as_its_workers_record_is():
    """The per-task figure is the review page's per-worker figure (one formula): a worker with one
    task has the same seconds per question."""
    study = open_utility_study(name="timed", n_items=2, n_sources=1, quota=1, gold="yes")
    task = work(study, f"T{0:023d}", shown_for=1.5)
    (record,) = study_workers(study=study)
    assert task_seconds_per_question(tasks=study.assignments.all()) == {task.pk: record.seconds_per_question}
    assert record.seconds_per_question == pytest.approx(3.0, abs=0.2)
