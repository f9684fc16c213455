"""The management command and the Celery task (the report pages: test_report.py)."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command

from scoring.models import ScoreRun, UnitScore
from scoring.services import outcomes_import, study_score
from scoring.tasks import score_study_task


@pytest.fixture
def scored_run(imported_study, utility_file):
    outcomes_import(study=imported_study, file=utility_file, user=None)
    return study_score(study=imported_study, similarity=False)


def test_score_study_command_writes_results_and_tables_and_prints_shares(scored_run, imported_study, tmp_path):
    out = io.StringIO()
    call_command("score_study", str(imported_study.pk), "--out", str(tmp_path), "--no-similarity", stdout=out)

    text = out.getvalue()
    assert "imported utility check: 0 mismatches of 1374 rows" in text
    assert "gpt3" in text and "t5large" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["utility_shares"]["t53b"]["n"] == 458
    with (tmp_path / "units.csv").open() as fh:
        assert sum(1 for _ in csv.DictReader(fh)) == 1374
    with (tmp_path / "utility_shares.csv").open() as fh:
        rows = {r["source"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"gpt3", "t53b", "t5large", "all"}


@pytest.mark.django_db
def test_score_study_command_unknown_study_is_a_clear_error():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No study with id 999999"):
        call_command("score_study", "999999")


def test_task_fills_pending_run_and_second_delivery_changes_nothing(imported_study, utility_file):
    outcomes_import(study=imported_study, file=utility_file, user=None)
    run = ScoreRun.objects.create(study=imported_study, by_operator=True)  # as score_run_enqueue(user=None)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("django.conf.settings.RL_SCORING_SIMILARITY", False, raising=False)
        assert score_study_task(imported_study.pk, run.pk) == run.pk
        run.refresh_from_db()
        finished = run.finished_at
        assert run.status == ScoreRun.Status.DONE
        assert score_study_task(imported_study.pk, run.pk) == run.pk

    run.refresh_from_db()
    assert run.finished_at == finished
    assert ScoreRun.objects.filter(study=imported_study).count() == 1
    assert UnitScore.objects.filter(study=imported_study).count() == 1374


@pytest.mark.django_db
def test_score_study_command_prints_what_gen_u_and_the_counted_answers_rest_on(tmp_path):
    """U(utility | Gen-U) is printed with the Gen-U method under it (question filter, tie rule,
    answerers), and the figures with the rule of which answers they count, as results.json says."""
    from annotations.services.platforms.access import OPERATOR
    from annotations.services.platforms.close import study_close
    from studies.models import GeneralizationQuestion, GenUPrediction
    from studies.services.questions import generalization_questions_set_validation
    from tests.work import open_utility_study, work

    study = open_utility_study(name="genu-command", n_items=2, n_sources=1, quota=2)
    for w in range(2):
        work(study, f"PID-genu-command-{w}")
    study_close(user=OPERATOR, study=study)
    source = study.sources.get()
    for item in study.items.all():
        question = GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Really, {item.question}",
                                                         answer=item.gold_answer)
        generalization_questions_set_validation(questions=[question], status="valid")
        for answerer, correct in (("I", False), ("IR", True)):
            GenUPrediction.objects.create(generalization_question=question, rationale_source=source,
                                          answerer=answerer, answerer_model=f"t5-base-{answerer}", correct=correct,
                                          predicted_answer=question.answer if correct else "no")
    out = io.StringIO()
    call_command("score_study", str(study.pk), "--out", str(tmp_path), "--no-similarity", stdout=out)

    results = ScoreRun.objects.filter(study=study).latest("pk").results
    lines = out.getvalue().splitlines()
    genu_line = next(i for i, line in enumerate(lines) if line.startswith("theils_u_utility_given_gen_u: "))
    assert lines[genu_line + 1] == f"  Gen-U method: {results['gen_u']['method']}"
    assert "ties to the lowest score" in results["gen_u"]["method"]
    counted = results["counted_answers"]
    assert (f"  counted answers: {counted['rule']} ({counted['tasks_approved']} tasks approved, "
            f"{counted['tasks_not_reviewed']} submitted and not yet reviewed, 0 failing an attention check)") in lines
    assert counted["tasks_not_reviewed"] == 2


@pytest.mark.django_db
def test_score_study_command_prints_what_the_shares_and_task_accuracy_rest_on(tmp_path):
    """The shares' table is followed by what they rest on (majority rule, tie counted wrong, counted
    answers, short units, the bootstrap's confidence, resamples and seed) and Theil's U given task
    accuracy by the task-accuracy reading: the notes the written files carry (``results_folder``)."""
    from scoring.services.results_folder import task_accuracy_note, utility_note
    from tests.work import open_utility_study, work

    study = open_utility_study(name="notes-command", n_items=2, n_sources=2, quota=2, predicts=["yes", "no"])
    for w in range(2):
        work(study, f"PID-notes-command-{w}")
    out = io.StringIO()
    call_command("score_study", str(study.pk), "--no-similarity", "--out", str(tmp_path / "o"), stdout=out)

    results = ScoreRun.objects.filter(study=study).latest("pk").results
    lines = out.getvalue().splitlines()
    shares_end = next(i for i, line in enumerate(lines) if line.startswith("all "))
    note = utility_note(results)
    assert lines[shares_end + 1] == f"  {note}"
    assert "a majority tie counted wrong" in note and "percentile bootstrap over units" in note
    assert "2,000 resamples (seed 0)" in note and "95% intervals" in note
    u_line = next(i for i, line in enumerate(lines) if line.startswith("theils_u_utility_given_task_accuracy: "))
    accuracy = task_accuracy_note(results)
    assert lines[u_line + 1] == f"  {accuracy}"
    assert accuracy.startswith("task accuracy over the scored units only")
