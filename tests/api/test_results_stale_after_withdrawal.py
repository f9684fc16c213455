"""After a participant withdraws, GET /api/v1/studies/<id>/results/ and /summary/ say that the latest
run's figures still rest on the withdrawn answers (``scores_stale``, the study bundle's own section,
``bundle.export.scores_staleness``), and stop saying so once the study is scored again."""
from __future__ import annotations

import pytest

from annotations.models import Annotation, Claim
from annotations.services.withdrawal import participant_withdraw
from scoring.models import ScoreRun
from scoring.services import study_score
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db


def _read(api, study) -> tuple[dict, list[dict]]:
    results = api.get(f"/api/v1/studies/{study.pk}/results/")
    summary = api.get(f"/api/v1/studies/{study.pk}/summary/")
    assert results.status_code == summary.status_code == 200, (results.content, summary.content)
    return results.json(), summary.json()


def test_results_and_summary_say_stale_after_a_withdrawal_and_fresh_after_scoring_again(
        client_for, study_data, researcher):
    study, leaving = study_data.study, study_data.participants[0]
    api = client_for(researcher)
    results, summary = _read(api, study)
    assert results["scores_stale"]["stale"] is False and results["scores_stale"]["score_run"] == study_data.run.pk
    assert results["scores_stale"]["withdrawn_since_run"] == {"participants": 0, "answers": 0, "counted_answers": 0}
    assert summary and all(row["stale"] is False and row["stale_units"] == 0 for row in summary)

    theirs = Annotation.objects.filter(claim__participant=leaving).count()
    their_units = set(Claim.objects.filter(study=study, participant=leaving, unit__isnull=False)
                      .values_list("unit__item_id", "unit__source__name"))
    assert theirs > 0 and their_units
    grant(researcher, "studies.change_study")
    participant_withdraw(user=researcher, study=study, worker_id=leaving.external_id)

    results, summary = _read(api, study)
    stale = results["scores_stale"]
    assert stale["stale"] is True, stale
    assert stale["withdrawn_since_run"] == {"participants": 1, "answers": theirs, "counted_answers": theirs}
    assert stale["stale_units"] == len(their_units) and stale["note"]
    assert {(u["item_id"], u["source"]) for u in stale["units"]} == their_units
    # the run's own figures are still the run's (nothing recomputed behind the reader's back)
    assert results["utility_shares"] == study_data.run.results["utility_shares"]
    by_source = {row["source_name"]: row for row in summary}
    for name, row in by_source.items():
        n = sum(1 for _, source in their_units if source == name)
        assert row["stale_units"] == n and row["stale"] is (n > 0), row
        assert row["withdrawn_since_run"] == stale["withdrawn_since_run"]
    assert any(row["stale"] for row in summary)

    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    results, summary = _read(api, study)
    assert results["scores_stale"]["stale"] is False and results["scores_stale"]["score_run"] == run.pk
    assert results["scores_stale"]["stale_units"] == 0 and "note" not in results["scores_stale"]
    assert results["scores_stale"]["withdrawn_since_run"]["participants"] == 0
    assert all(row["stale"] is False and row["stale_units"] == 0 for row in summary)
    assert all(row["withdrawn_since_run"]["participants"] == 0 for row in summary)
