"""Settings that change a published number are named in the results, and where SPEC leaves the
choice open the other readings are shown: which answers count (attention checks, review), the
unit of agreement, units short of annotators, what task accuracy is over, and the intervals."""
from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from annotations.models import AttentionCheck, Participant
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve
from annotations.services.release import assignment_release, assignment_return
from scoring.metrics import pipeline
from scoring.reports.sections import (
    agreement_section,
    generalization_section,
    theils_u_section,
    utility_section,
)
from scoring.services import results_folder, study_score
from scoring.services.results_folder import agreement_rows, association_rows
from studies.models import Study
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

_workers = itertools.count()


def _task(study, unit, before, after, *, checks=(), submit=True):
    """One new worker's task on ``unit``: the before and after answers, then each attention check
    of ``checks`` ((check, answer) pairs) answered, through the questionnaire's services; submitted
    unless told otherwise. The claims are placed by hand, as ``collect`` does, so that the test
    chooses which unit and which checks the task holds."""
    from annotations.models import Assignment, Claim, Unit

    participant = Participant.objects.create(platform="link", external_id=f"reader{next(_workers)}")
    task = Assignment.objects.create(study=study, participant=participant,
                                     expires_at=timezone.now() + timedelta(hours=1))
    claim = Claim.objects.create(assignment=task, unit=unit, study=study, participant=participant,
                                 question_key=unit.question_key, position=0)
    Unit.objects.filter(pk=unit.pk).update(n_claimed=F("n_claimed") + 1)
    annotation_submit(assignment=task, claim=claim, step="before", answer=before)
    annotation_submit(assignment=task, claim=claim, step="after", answer=after)
    for position, (check, answer) in enumerate(checks, start=1):
        attention = Claim.objects.create(assignment=task, attention_check=check, study=study, participant=participant,
                                         question_key=f"attn:{check.pk}", position=position)
        annotation_submit(assignment=task, claim=attention, step="attention", answer=answer)
    return assignment_submit(assignment=task) if submit else task


def _check(study, n):
    return AttentionCheck.objects.create(study=study, question=f"Check {n}: choose 'no'.", correct_answer="no",
                                         choices=[{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}])


def test_counted_answers_show_what_leaving_out_failed_or_unreviewed_tasks_gives(utility_study):
    """Tasks that failed an attention check and tasks nobody reviewed count (the published
    figures); the results give the figures without them, each reading's rule named, and the
    report prints them."""
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(annotators_per_unit=4)
    study.refresh_from_db()
    unit = make_unit(study, items[0], good, quota=4)
    c1, c2 = _check(study, 1), _check(study, 2)
    approved = _task(study, unit, "no", "yes", checks=[(c1, "no"), (c2, "no")])
    assignment_approve(user=OPERATOR, study=study, assignment=approved)
    _task(study, unit, "no", "no", checks=[(c1, "yes"), (c2, "no")])   # one check of two wrong
    _task(study, unit, "no", "no", checks=[(c1, "no"), (c2, "no")])
    _task(study, unit, "yes", "yes", checks=[(c1, "yes"), (c2, "yes")])  # every check wrong

    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    counted = run.results["counted_answers"]
    assert counted["tasks_failing_an_attention_check"] == 2
    assert "any one of them was answered wrong" in counted["attention_check_rule"]
    readings = counted["other_readings"]
    assert set(readings) == {"without_tasks_failing_any_check", "without_tasks_failing_every_check",
                             "approved_tasks_only", "without_units_with_accepted_flags", "without_speeding_tasks",
                             "without_blocked_workers"}
    # published: after 2 yes / 2 no, a tie, so not useful
    assert run.results["utility_shares"]["all"]["useful"] == 0.0
    anyr, every, approved_only = (readings[k] for k in ("without_tasks_failing_any_check",
                                                        "without_tasks_failing_every_check", "approved_tasks_only"))
    assert (anyr["answers_left_out"], every["answers_left_out"], approved_only["answers_left_out"]) == (4, 2, 6)
    assert "any one of them" in anyr["rule"] and "every one of them" in every["rule"]
    assert "approved tasks only" in approved_only["rule"]
    for row in (anyr, every, approved_only):  # each with the figures a reader compares
        assert {"utility_shares", "theils_u_utility_given_task_accuracy", "agreement"} <= set(row)
        assert row["identical_to"] is None
    assert approved_only["utility_shares"]["all"]["useful"] == 1.0 and approved_only["n_units_scored"] == 1
    assert anyr["agreement"]["before"]["n_annotations"] == 2
    notes = " ".join(utility_section(run.results).notes)
    assert "Other reading, approved tasks only: 6 answers left out, 1 units scored; useful 1.000" in notes
    assert "Other reading, without the tasks that failed every attention check: 2 answers left out" in notes


def test_a_reading_that_keeps_every_answer_says_it_is_the_published_one(utility_study):
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(annotators_per_unit=2)
    unit = make_unit(study, items[0], good, quota=2)
    for _ in range(2):
        assignment_approve(user=OPERATOR, study=study, assignment=_task(study, unit, "no", "yes"))
    run = study_score(study=study, similarity=False)
    readings = run.results["counted_answers"]["other_readings"]
    assert all(r["identical_to"] == "published" and r["answers_left_out"] == 0 for r in readings.values())
    assert readings["approved_tasks_only"]["utility_shares"] == run.results["utility_shares"]


def test_returned_and_expired_tasks_with_completed_answers_are_counted_as_left_out(utility_study):
    study, items, good, _ = utility_study
    unit = make_unit(study, items[0], good)
    collect(study, unit, [("no", "yes")] * 2)
    returned = _task(study, unit, "no", "yes", submit=False)
    assignment_return(assignment=returned)
    expired = _task(study, make_unit(study, items[1], good), "yes", "yes", submit=False)
    assignment_release(assignment=expired, status="expired")

    results = study_score(study=study, similarity=False).results
    counted = results["counted_answers"]
    assert (counted["tasks_returned_with_completed_answers"], counted["answers_returned"]) == (1, 2)
    assert (counted["tasks_expired_with_completed_answers"], counted["answers_expired"]) == (1, 2)
    # what expires a task is named beside the count (its settings, or the minutes the study fixed)
    assert counted["expiry_rule"].startswith("a task expires when")
    assert ("1 returned tasks (2 answers to completed questions) and 1 expired tasks (2 answers; "
            f"{counted['expiry_rule']}) are left out") in " ".join(utility_section(results).notes)


@pytest.fixture
def uneven_run(utility_study):
    """Three annotators asked per unit: item 0 has 3 under each source, item 1 only 1 under good-lm
    (short), item 2's good-lm unit has none yet."""
    study, items, good, bad = utility_study
    Study.objects.filter(pk=study.pk).update(annotators_per_unit=3)
    collect(study, make_unit(study, items[0], good, quota=3), [("no", "yes"), ("no", "yes"), ("yes", "yes")])
    collect(study, make_unit(study, items[0], bad, quota=3), [("no", "no"), ("yes", "no"), ("no", "no")])
    collect(study, make_unit(study, items[1], good, quota=3), [("no", "yes")])
    make_unit(study, items[2], good, quota=3)
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    return run


def test_agreement_names_its_unit_counts_the_units_alpha_uses_and_gives_the_other_readings(uneven_run):
    results = uneven_run.results
    before = results["agreement"]["before"]
    assert before["unit"] == pipeline.AGREEMENT_UNIT["item_id"]
    # 3 units rated, one of them once: alpha uses 2
    assert (before["n_units"], before["n_units_alpha"], before["n_units_single_answer"]) == (3, 2, 1)
    # raters differ (3, 3, 1): kappa over all is None, over the two full units it is given
    assert before["fleiss_kappa"] is None
    full = before["fleiss_kappa_full_units"]
    assert (full["raters"], full["n_units"]) == (3, 2) and full["fleiss_kappa"] is not None
    # by item: item 0's six before answers (both sources) as one unit, item 1's one answer
    by_item = results["agreement_by_item"]["before"]
    assert by_item["unit"] == pipeline.AGREEMENT_BY_ITEM["item_id"]
    assert (by_item["n_units"], by_item["n_units_alpha"], by_item["n_annotations"]) == (2, 1, 7)
    rows = agreement_rows(results)
    assert [r["reading"] for r in rows] == ["published", "published", "by item"]
    assert rows[0]["fleiss_kappa_note"].startswith("Not computed over all units")
    assert rows[0]["fleiss_kappa_full_units"] == full["fleiss_kappa"]
    section = agreement_section(results)
    assert any(note.startswith("Unit of agreement (SPEC leaves it open)") for note in section.notes)
    assert [r["step"] for r in section.tables[0].rows] == ["before", "after", "before (by item)"]


def test_short_units_are_counted_per_source_with_the_full_units_reading_and_csv_notes(uneven_run):
    results = uneven_run.results
    short = results["short_units"]
    assert short["n_short_by_source"] == {"bad-lm": 0, "good-lm": 1, "all": 1}
    assert short["full_units_rule"] == pipeline.FULL_UNITS_RULE
    assert short["utility_shares_full_units_only"]["all"]["n"] == 2
    assert results["utility_shares"]["all"]["n"] == 3
    assert any("1 units are short of annotators (bad-lm 0, good-lm 1)" in n for n in utility_section(results).notes)
    for row in results_folder.utility_share_rows(results):
        assert "tie counted wrong" in row["note"] and "resamples" in row["note"] and "counted:" in row["note"]
        assert "1 units short of annotators" in row["note"]
    task_rows = [r for r in association_rows(results) if "task_accuracy" in r["measure"]]
    assert task_rows and all("scored units only" in r["note"] and "tie counted wrong" in r["note"]
                             for r in task_rows)


def test_task_accuracy_says_it_is_over_the_scored_units_with_their_n(uneven_run):
    results = uneven_run.results
    # item 2's good-lm unit has no answers: not in task accuracy
    assert results["task_accuracy_n"] == {"bad-lm": 1, "good-lm": 2, "all": 3}
    notes = " ".join(theils_u_section(results, None, both_directions=False).notes)
    assert "over the scored units only" in notes and "good-lm 2" in notes


def test_figure_4_intervals_are_described_as_the_run_drew_them():
    gen = {"n": 1, "accuracy_before": 0.0, "accuracy_after": 1.0, "accuracy_delta": 1.0,
           "accuracy_delta_ci": [1.0, 1.0]}
    results = {"study": {"kind": "generalization"}, "generalization": {"all": gen, "by_type": {"rephrase": gen}},
               "bootstrap": {"method": "percentile", "confidence": 0.9, "n_resamples": 500, "seed": 7}}
    notes = generalization_section(results).notes
    assert "90% intervals: percentile bootstrap over units, 500 resamples (seed 7)." in notes
    assert "95% intervals: percentile bootstrap over units." not in notes
