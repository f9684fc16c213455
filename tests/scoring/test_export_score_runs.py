"""Exported scores name the run that wrote them and say when they are stale (task F): each row's
own ``score_run``, ``stale`` once the answers that count changed after that run, an outcomes
re-import that unscores the rows it changes, the per-source summary's accuracies over the scored
units, ``results.json``'s ``run``, and imported outcomes without a worker count."""
from __future__ import annotations

import io
import json

import pytest

from annotations.models import Annotation
from annotations.services.platforms.review import assignment_reviewed
from scoring.api.export_annotations import annotation_columns, annotation_rows
from scoring.api.export_units import SCORE_COLUMNS, score_rows, source_summaries
from scoring.models import UnitScore
from scoring.selectors import plan_prior, unit_counting_changes
from scoring.services import outcomes_import, study_score
from scoring.services.bundle.export import score_settings
from tests.scoring.released import imported_study_create
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def wrong_then_right(claim, step):
    return "no" if step == "before" else "yes"


def annotation_export(study) -> list[dict]:
    names = [c.name for c in annotation_columns(raw_worker_ids=False)]
    return [dict(zip(names, row, strict=True)) for row in annotation_rows(
        Annotation.objects.filter(claim__study=study), study=study, user=None, raw_worker_ids=False)]


def unit_export(study) -> list[dict]:
    names = [c.name for c in SCORE_COLUMNS]
    return [dict(zip(names, row, strict=True)) for row in score_rows(UnitScore.objects.filter(study=study), user=None)]


@pytest.fixture
def scored_three():
    """One unit answered by three workers (two wrong then right, one wrong after), scored: utility 1."""
    study = open_utility_study(name="f-stale", n_items=1, n_sources=1, quota=3, gold="yes")
    first = work(study, "FSTALE00000000000000000A1", answer=wrong_then_right)
    work(study, "FSTALE00000000000000000A2", answer=wrong_then_right)
    work(study, "FSTALE00000000000000000A3", answer=lambda claim, step: "no")
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    return study, first, run


def test_unit_scores_name_the_run_that_stored_them(scored_three):
    study, _, run = scored_three
    score = UnitScore.objects.get(study=study)
    assert score.score_run_id == run.pk and score.utility == 1
    (row,) = unit_export(study)
    assert (row["score_run"], row["stale"]) == (run.pk, False)


def test_a_task_rejected_after_the_run_marks_its_rows_stale_until_scored_again(scored_three):
    study, first, run = scored_three

    assignment_reviewed(first.pk, approved=False)  # the review service, as the platform's outcome

    rows = [r for r in annotation_export(study) if r["step"] in ("before", "after")]
    assert {(r["score_run"], r["utility"], r["stale"]) for r in rows} == {(run.pk, 1, True)}
    assert {r["counts"] for r in rows if r["assignment_id"] == first.pk} == {False}
    (unit,) = unit_export(study)
    assert (unit["score_run"], unit["utility"], unit["stale"]) == (run.pk, 1, True)

    again = study_score(study=study, similarity=False)

    rows = [r for r in annotation_export(study) if r["step"] in ("before", "after")]
    assert {(r["score_run"], r["utility"], r["stale"]) for r in rows} == {(again.pk, -1, False)}
    (unit,) = unit_export(study)
    assert (unit["score_run"], unit["n_annotators"], unit["stale"]) == (again.pk, 2, False)


def test_a_task_submitted_after_the_run_marks_the_unit_stale():
    study = open_utility_study(name="f-late", n_items=1, n_sources=1, quota=3, gold="yes")
    work(study, "FLATE000000000000000000A1", answer=wrong_then_right)
    run = study_score(study=study, similarity=False)
    assert unit_export(study)[0]["stale"] is False

    work(study, "FLATE000000000000000000A2", answer=wrong_then_right)

    (unit,) = unit_export(study)
    assert (unit["score_run"], unit["n_annotators"], unit["stale"]) == (run.pk, 1, True)


def test_the_staleness_of_an_export_is_read_once_per_study_not_per_row():
    """As many queries for a unit of one answer as for two units of three answers each."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for name, n_items, n_workers in (("f-q1", 1, 1), ("f-q6", 2, 3)):
        study = open_utility_study(name=name, n_items=n_items, n_sources=1, quota=3, gold="yes", units_per_task=2)
        for n in range(n_workers):
            work(study, f"{name.upper()}W{n}".ljust(24, "0"), answer=wrong_then_right)
        study_score(study=study, similarity=False)
        with CaptureQueriesContext(connection) as queries:
            rows = annotation_export(study)
        assert {r["stale"] for r in rows if r["unit_id"]} == {False}
        counts.append(len(queries))
    assert counts[0] == counts[1]


# --- imported outcomes ---------------------------------------------------------------------------

GAUSS = {"question": "Did Gauss have a normal brain structure?", "rationale_source": "m", "ground_truth_label": False,
         "human_predicted_label_before_rationale": True, "human_predicted_label_after_rationale": False}


def _import(study, *rows):
    return outcomes_import(study=study, file=io.BytesIO("\n".join(json.dumps(r) for r in rows).encode()), user=None)


def test_reimported_outcomes_unscore_the_rows_they_change(strategyqa_test_items):
    study = imported_study_create(strategyqa_test_items)
    _import(study, GAUSS)
    run = study_score(study=study, similarity=False)
    assert (UnitScore.objects.get(study=study).utility, unit_export(study)[0]["score_run"]) == (1, run.pk)

    _import(study, dict(GAUSS, human_predicted_label_after_rationale=True))  # corrected: wrong after

    (row,) = unit_export(study)
    assert (row["before_majority"], row["after_majority"]) == ("yes", "yes")
    assert (row["after_correct"], row["utility"], row["utility_label"], row["score_run"], row["stale"]) == \
        (None, None, "", None, None)
    rescored = study_score(study=study, similarity=False)
    (row,) = unit_export(study)
    assert (row["after_correct"], row["utility"], row["score_run"], row["stale"]) == (False, -1, rescored.pk, False)


def test_reimporting_the_same_outcomes_keeps_their_scores(strategyqa_test_items):
    study = imported_study_create(strategyqa_test_items)
    _import(study, GAUSS)
    run = study_score(study=study, similarity=False)

    _import(study, GAUSS)

    (row,) = unit_export(study)
    assert (row["utility"], row["score_run"], row["stale"]) == (1, run.pk, False)


def test_outcomes_without_a_worker_count_store_none_not_the_designs(strategyqa_test_items):
    study = imported_study_create(strategyqa_test_items)
    _import(study, GAUSS)

    assert UnitScore.objects.get(study=study).n_annotators is None
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    (row,) = unit_export(study)
    assert row["n_annotators"] is None and row["utility"] == 1
    assert "not known" in next(c for c in SCORE_COLUMNS if c.name == "n_annotators").description


def test_outcomes_with_a_worker_count_keep_it(strategyqa_test_items):
    study = imported_study_create(strategyqa_test_items)
    _import(study, dict(GAUSS, n_annotators=3))
    study_score(study=study, similarity=False)
    assert UnitScore.objects.get(study=study).n_annotators == 3


def test_a_pilot_of_outcomes_without_a_worker_count_says_its_workers_are_assumed(strategyqa_test_items,
                                                                                 django_user_model):
    study = imported_study_create(strategyqa_test_items)
    _import(study, GAUSS)
    study_score(study=study, similarity=False)
    admin = django_user_model.objects.create_superuser("f-admin", "f@example.org", "pw-f-admin-1")

    prior = plan_prior(user=admin, key=f"pilot:{study.pk}")

    assert f"{study.annotators_per_unit} workers per unit assumed" in prior.label
    assert "does not say how many answered" in prior.label


def test_the_summary_of_an_imported_study_never_scored_has_no_accuracy(strategyqa_test_items):
    study = imported_study_create(strategyqa_test_items)
    _import(study, dict(GAUSS, human_predicted_label_before_rationale=False))  # right before and after

    (summary,) = source_summaries(study=study, user=None)

    assert (summary["n_units"], summary["n_scored"]) == (1, 0)
    assert (summary["accuracy_before"], summary["accuracy_after"]) == (None, None)
    study_score(study=study, similarity=False)
    (summary,) = source_summaries(study=study, user=None)
    assert (summary["accuracy_before"], summary["accuracy_after"]) == (1.0, 1.0)


# --- results.json ----------------------------------------------------------------------------------

def test_results_json_names_its_run_and_the_code_it_ran(scored_three):
    study, _, run = scored_three

    block = run.results["run"]

    assert block["id"] == run.pk and block["finished_at"] == run.finished_at.isoformat()
    settings_json = score_settings(run.results, run_id=run.pk)
    assert (block["app"], block["packages"]) == (settings_json["app"], settings_json["packages"])
    assert set(block["packages"]) >= {"numpy", "pandas", "scipy"} and "commit" in block["app"]
    assert list(run.results)[:2] == ["schema_version", "run"]


def test_counting_changes_are_one_row_per_unit(scored_three):
    study, first, _ = scored_three
    assignment_reviewed(first.pk, approved=False)
    (change,) = unit_counting_changes(study=study).values()
    assert change[0] == 2 and change[1] is not None
