"""A blocked worker's submitted and approved work still counts: a block ends only the worker's tasks
in progress (``worker_block``). The published figures stay as they were (changing what counts by
default would change every published number silently); ``counted_answers`` names the rule and the
counts of the tasks of workers blocked in the study, a warning tells the researcher to reject the work
or read the other reading, and ``other_readings.without_blocked_workers`` gives the figures without
them, in results.json, the report and the exports alike. Which blocks cover a study is
``annotations.selectors.blocks_covering``'s rule: made on it, by its owner, or everywhere. Built
through the services: workers answer through the questionnaire (``tests.work``), the owner blocks
(``worker_block``) and rejects (``assignment_reject``)."""
from __future__ import annotations

import json

import pytest

from annotations.models import Annotation, Assignment
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.participants import participant_get_or_create
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.review import assignment_reject
from scoring.api.export_units import scored_with_run
from scoring.reports.sections import question_validation_section, utility_section
from scoring.services import study_score
from studies.models import Platform, Study
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

REJECTION = "These answers were given by a worker we blocked for copying answers, so they cannot be accepted. " * 2


def wrong_then_right(claim, step) -> str:
    return "no" if step == "before" else "yes"


def wrong_both(claim, step) -> str:
    return "no"


def _one_unit(owner, name: str) -> tuple[Study, list[Assignment]]:
    """One unit (quota 3) answered (no -> yes), (no -> yes), (no -> no): wrong before, right after
    (useful) with all three; without the second worker the after-majority is a tie (wrong): not useful."""
    study = open_utility_study(name=name, n_items=1, n_sources=1, quota=3, gold="yes", owner=owner,
                               platform=Platform.LINK)
    tasks = [work(study, f"{name}-w{i}", answer=answer, platform=Platform.LINK)
             for i, answer in enumerate((wrong_then_right, wrong_then_right, wrong_both))]
    return study, tasks


def _score(study: Study):
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    return run


def test_a_blocked_workers_submitted_work_counts_is_named_and_left_out_by_the_other_reading():
    alice, _ = staff_client("alice")
    study, tasks = _one_unit(alice, "blocked")
    worker_block(user=alice, study=study, participant=tasks[1].participant, reason="Copied answers.")
    assert Assignment.objects.get(pk=tasks[1].pk).status == Assignment.Status.SUBMITTED  # the block left it counted

    run = _score(study)
    # the published figures are unchanged: the blocked worker's answers count
    assert run.results["utility_shares"]["all"]["useful"] == 1.0
    counted = run.results["counted_answers"]
    assert (counted["tasks_of_blocked_workers"], counted["answers_of_blocked_workers"]) == (1, 2)
    assert "blocks_covering" in counted["blocked_worker_rule"]
    reading = counted["other_readings"]["without_blocked_workers"]
    assert (reading["answers_left_out"], reading["n_answers"], reading["identical_to"]) == (2, 4, None)
    assert reading["utility_shares"]["all"]["useful"] == 0.0 and reading["utility_shares"]["all"]["not_useful"] == 1.0
    assert reading["rule"].endswith(counted["blocked_worker_rule"])
    warning = next(w for w in run.results["warnings"] if "workers blocked" in w)
    assert warning.startswith("1 counted tasks (2 answers) are of workers blocked in this study")
    assert "Reject the work" in warning and "counted_answers.other_readings.without_blocked_workers" in warning
    # the report and the exports name it
    notes = " ".join(utility_section(run.results).notes)
    assert "Other reading, without the tasks of blocked workers: 2 answers left out, 1 units scored; useful 0.000" \
        in notes
    assert "Counted as well: 1 tasks of workers blocked in this study (2 answers;" in notes
    exported = scored_with_run(run, user=None)["other_readings"]
    assert "without_blocked_workers: 2 answers left out, 1 units scored, useful 0.000" in exported

    # rejecting the blocked worker's task is the published reading of the other one
    assignment_reject(user=alice, study=study, assignment=tasks[1], feedback=REJECTION)
    after = _score(study)
    assert after.results["utility_shares"]["all"]["useful"] == 0.0
    assert after.results["counted_answers"]["tasks_of_blocked_workers"] == 0
    assert after.results["counted_answers"]["other_readings"]["without_blocked_workers"]["identical_to"] == "published"
    assert not any("workers blocked" in w for w in after.results["warnings"])


def test_no_blocked_worker_leaves_every_answer_and_says_nothing():
    alice, _ = staff_client("alice")
    study, _tasks = _one_unit(alice, "unblocked")
    run = _score(study)
    counted = run.results["counted_answers"]
    assert (counted["tasks_of_blocked_workers"], counted["answers_of_blocked_workers"]) == (0, 0)
    assert counted["other_readings"]["without_blocked_workers"]["identical_to"] == "published"
    assert not any("workers blocked" in w for w in run.results["warnings"])
    assert "Counted as well" not in " ".join(utility_section(run.results).notes)


def test_the_blocks_that_cover_the_study_are_blocks_coverings():
    """The owner's block made on another of their studies covers this one; another researcher's
    block on their own study, and an operator's block on another study, do not."""
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    study, tasks = _one_unit(alice, "covered")
    others = {}
    for owner, name in ((alice, "alices-other"), (bob, "bobs"), (None, "nobodys")):
        other = open_utility_study(name=name, n_items=1, n_sources=1, quota=3, gold="yes", owner=owner,
                                   platform=Platform.LINK)
        others[name] = other
    # worker 0 is blocked by bob in bob's study and by the operator in a study nobody owns: not here
    for name, user in (("bobs", bob), ("nobodys", None)):
        task = work(others[name], tasks[0].participant.external_id, platform=Platform.LINK)
        worker_block(user=user or alice.__class__.objects.create_superuser("root", "r@example.org", "pw"),
                     study=others[name], participant=task.participant, reason="Copied answers.")
    run = _score(study)
    assert run.results["counted_answers"]["tasks_of_blocked_workers"] == 0

    # worker 1 is blocked by alice in her other study: her block covers every study she owns
    task = work(others["alices-other"], tasks[1].participant.external_id, platform=Platform.LINK)
    worker_block(user=alice, study=others["alices-other"], participant=task.participant, reason="Copied answers.")
    run = _score(study)
    counted = run.results["counted_answers"]
    assert (counted["tasks_of_blocked_workers"], counted["answers_of_blocked_workers"]) == (1, 2)
    assert counted["other_readings"]["without_blocked_workers"]["utility_shares"]["all"]["not_useful"] == 1.0


def _validate(study: Study, worker: str, verdict: dict) -> Assignment:
    """``worker`` judges every question of ``study`` with ``verdict`` and submits."""
    participant = participant_get_or_create(platform=Platform.LINK, external_id=worker)
    task = assignment_start(study=study, participant=participant, consented=True)
    for claim in task.claims.select_related("attention_check").order_by("position"):
        if claim.attention_check_id:
            annotation_submit(assignment=task, claim=claim, step="attention", answer=claim.attention_check.correct_answer)
        else:
            annotation_submit(assignment=task, claim=claim, step=Annotation.Step.VALIDATION, answer="", payload=verdict)
    return assignment_submit(assignment=task)


def test_a_question_validation_study_points_to_its_own_other_readings():
    """A question-validation study keeps its other readings under question_validation: the warnings
    point there, not to counted_answers.other_readings, which it has not."""
    alice, _ = staff_client("alice")
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=1, n_genq=1, n_sources=1, quota=3,
                       units_per_task=1, platform=Platform.LINK, owner=alice)
    yes = {"well_formed": "yes", "type_correct": "yes", "answer_correct": "yes", "corrected_answer": ""}
    no = {**yes, "answer_correct": "no", "corrected_answer": "no"}
    tasks = [_validate(study, f"validator-{i}", verdict) for i, verdict in enumerate((yes, no, no))]
    worker_block(user=alice, study=study, participant=tasks[2].participant, reason="Copied answers.")

    run = _score(study)
    block = run.results["question_validation"]
    assert block["n_invalid"] == 1  # the blocked worker's verdict counts
    reading = block["other_readings"]["without_blocked_workers"]
    assert (reading["answers_left_out"], reading["n_invalid"], reading["n_undecided"]) == (1, 0, 1)
    assert "other_readings" not in run.results["counted_answers"]
    warning = next(w for w in run.results["warnings"] if "workers blocked" in w)
    assert "question_validation.other_readings.without_blocked_workers" in warning
    assert "counted_answers.other_readings" not in json.dumps(run.results["warnings"])
    notes = " ".join(question_validation_section(run.results).notes)
    assert "Other reading, without the tasks of blocked workers: 1 answers left out" in notes
