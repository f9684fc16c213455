"""GET /api/v1/studies/<id>/summary/ lists every source of the study, scored or not: a source with
no scored unit gets a row (n_scored 0, null shares), and n_units counts the source's units in the
study, not its scored rows. The run's warning names the source with no unit scored."""
from __future__ import annotations

import pytest

from scoring.models import ScoreRun, UnitScore
from scoring.services import study_score
from studies.models import Platform, Study
from tests.annotations.factories import make_study
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def test_summary_gives_a_row_to_a_source_with_nothing_scored(client_for, researcher):
    # 2 items x 2 sources, one unit a task, one answer a unit: one worker fills one unit of one source
    study = open_utility_study(name="every-src", n_items=2, n_sources=2, quota=1, units_per_task=1,
                               owner=researcher, platform=Platform.LINK)
    work(study, "PID-every", platform=Platform.LINK)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    (scored_source,) = UnitScore.objects.filter(study=study).values_list("source__name", flat=True)
    (idle_source,) = {s.name for s in study.sources.all()} - {scored_source}

    response = client_for(researcher).get(f"/api/v1/studies/{study.pk}/summary/")
    assert response.status_code == 200, response.content
    rows = {row["source_name"]: row for row in response.json()}
    assert set(rows) == {scored_source, idle_source}
    assert (rows[scored_source]["n_units"], rows[scored_source]["n_scored"]) == (2, 1)
    idle = rows[idle_source]
    assert (idle["n_units"], idle["n_scored"], idle["n_useful"]) == (2, 0, 0)
    assert idle["share_useful"] is None and idle["accuracy_before"] is None and idle["task_accuracy"] is None
    assert idle["score_run"] == run.pk and idle["stale"] is False

    assert any("3 of 4 units have no completed answers" in w and f"no unit scored of source {idle_source}" in w
               for w in run.warnings), run.warnings


def test_a_scored_generalization_study_gives_no_utility_rows(client_for, researcher):
    """Only a utility study scores units' utility: a generalization study's run stores no unit
    scores, and its summary claims no source 'scored on nothing' (review of 1c75b5a)."""
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=3, quota=3, units_per_task=3,
                       owner=researcher, name="gen-summary")
    for n in range(3):
        work(study, f"GENS{n}", platform=Platform.LINK)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error

    response = client_for(researcher).get(f"/api/v1/studies/{study.pk}/summary/")
    assert response.status_code == 200, response.content
    assert response.json() == []
