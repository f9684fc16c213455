"""The scores API says which answers a unit's score counted, as the scores export does: a unit
whose majority counts a task that failed an attention check never reads like a clean one."""
from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject
from scoring.api.export_units import SCORED_WITH_COLUMNS
from scoring.models import ScoreRun
from scoring.services import outcomes_import, study_score
from scoring.services.score import COUNTED, FAILED_ANY
from studies.models import Study
from tests.scoring.released import imported_study_create
from tests.scoring.test_other_readings import _check, _task
from tests.scoring.test_services_score import make_unit

pytestmark = pytest.mark.django_db

COUNTED_COLUMNS = ("counted_answers", "counted_tasks_failing_a_check", "other_readings")


def _export_rows(client, study) -> dict[tuple[int, int], dict]:
    """The scores export (JSON lines) by (item, source), each cell as JSON gives it."""
    response = client.get(f"/api/v1/studies/{study.pk}/export/scores/", {"file_format": "jsonl"})
    assert response.status_code == 200
    frame = pd.read_json(io.BytesIO(b"".join(response.streaming_content)), lines=True, dtype=False)
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return {(row["item_id"], row["source_id"]): row for row in rows}


def test_the_scores_api_row_says_what_the_export_row_says_of_the_answers_counted(utility_study, admin_client):
    """The audit's probe: one clean task, one submitted task that answered its attention check
    wrong, one rejected task and one still active, scored. The export says one counted task failed
    a check; the API's list and single unit say the same, on every column the export takes from
    the unit's run (``SCORED_WITH_COLUMNS``), and ``reported_utility`` too."""
    study, items, good, _ = utility_study
    Study.objects.filter(pk=study.pk).update(annotators_per_unit=4)
    study.refresh_from_db()
    unit = make_unit(study, items[0], good, quota=4)
    check = _check(study, 1)
    _task(study, unit, "no", "yes", checks=[(check, "no")])                  # clean
    _task(study, unit, "no", "yes", checks=[(check, "yes")])                 # failed its check, counted
    rejected = _task(study, unit, "yes", "no", checks=[(check, "yes")])
    assignment_reject(user=OPERATOR, study=study, assignment=rejected, feedback="Failed the attention check.")
    _task(study, unit, "yes", "no", checks=[(check, "no")], submit=False)   # still active: not counted
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["counted_answers"]["tasks_failing_an_attention_check"] == 1

    exported = _export_rows(admin_client, study)
    row = exported[(items[0].pk, good.pk)]
    assert row["counted_tasks_failing_a_check"] == 1
    assert row["counted_answers"] == (f"{COUNTED}: 0 approved tasks and 2 submitted, not yet reviewed; "
                                      f"attention checks: {FAILED_ANY}")
    assert row["other_readings"].startswith("results.json counted_answers.other_readings gives ")
    keys = ("reported_utility", *SCORED_WITH_COLUMNS)
    assert set(COUNTED_COLUMNS) <= set(keys)

    listed = admin_client.get("/api/v1/scores/", {"study": study.pk}).json()["results"]
    assert len(listed) == len(exported)
    for served in listed:
        same = exported[(served["item"], served["source"])]
        assert {k: served.get(k, "missing") for k in keys} == {k: same[k] for k in keys}, served["id"]
    (mine,) = [served for served in listed if (served["item"], served["source"]) == (items[0].pk, good.pk)]
    assert mine["counted_tasks_failing_a_check"] == 1 and mine["score_run"] == run.pk
    single = admin_client.get(f"/api/v1/scores/{mine['id']}/").json()
    assert {k: single.get(k, "missing") for k in keys} == {k: row[k] for k in keys}


def test_the_scores_api_row_gives_the_utility_an_imported_file_stated(strategyqa_test_items, admin_client):
    """``reported_utility`` is a per-unit column of the scores export (imported outcomes: the
    utility the file stated); the API row gives it too, with what the run counted ("none counted
    here" for imported outcomes), as the export row does."""
    study = imported_study_create(strategyqa_test_items)
    line = {"question": "Did Gauss have a normal brain structure?", "rationale_source": "m",
            "ground_truth_label": False, "human_predicted_label_before_rationale": True,
            "human_predicted_label_after_rationale": False, "rationale_utility": 1}
    outcomes_import(study=study, file=io.BytesIO(json.dumps(line).encode()), user=None)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error

    (row,) = _export_rows(admin_client, study).values()
    assert row["reported_utility"] == 1 and row["counted_answers"].startswith("none counted here")
    (served,) = admin_client.get("/api/v1/scores/", {"study": study.pk}).json()["results"]
    keys = ("reported_utility", *SCORED_WITH_COLUMNS)
    assert {k: served.get(k, "missing") for k in keys} == {k: row[k] for k in keys}
