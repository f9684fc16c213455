"""Imported outcomes imported again while a run of the study computes: the run's figures count the
outcomes it read, which that import changed or removed, so it fails naming the import ("outcomes were
imported again while this run computed (FILE at TIME): score the study again") and stores nothing:
the re-imported rows keep the import's values and stay unscored, and scoring again gives what a
fresh study of the new file gives (before, the run wrote its old majorities, ties and number of
annotators back over the re-imported rows, and a row the import removed failed it with an internal
KeyError). A run writes onto imported rows only what it computes, never their imported fields.

The bundle copy of a study whose run a re-import made stale says so for every source in /summary/
too (``scores_stale.whole_run_stale``), not only at study level."""
from __future__ import annotations

import io
import json

import pytest

from scoring.errors import ScoringError
from scoring.models import ScoreRun, UnitScore
from scoring.services import outcomes_import, score, study_score
from scoring.services.bundle import bundle_import, bundle_stream
from scoring.services.bundle.export import scores_staleness
from scoring.services.outcomes import outcomes_study_create
from tests.scoring.test_outcomes_reimport_stale import _api, _changed, _write, owner, scored  # noqa: F401

pytestmark = pytest.mark.django_db

ROW = ("before_majority", "before_tie", "after_majority", "after_tie", "n_annotators", "before_correct",
       "after_correct", "utility")


def _tie_lines(rows: list[dict], *, before_known: bool) -> list[dict]:
    """Three outcomes of one source, the after answer right: the before answer a tie (v1) or right (v2)."""
    lines = []
    for row in rows[:3]:
        gold = bool(row["answer"])
        lines.append({"question": row["question"], "rationale_source": "m-tie", "ground_truth_label": gold,
                      "human_predicted_label_before_rationale": gold if before_known else None,
                      "human_predicted_label_after_rationale": gold})
    return lines


def _rows(study) -> list[tuple]:
    return list(UnitScore.objects.filter(study=study).order_by("item_id", "source_id").values_list(*ROW))


@pytest.fixture
def reimport_while_computing(monkeypatch):
    """Imports ``file`` into the study once the run has read its outcomes, before it stores: the
    real computation runs, then the import commits, as a user's import between the two would."""
    pending = {}

    def arm(*, study, file, user):
        pending.update(study=study, file=file, user=user)

    real = score._compute

    def computing(study, **kwargs):
        out = real(study, **kwargs)
        if pending:
            outcomes_import(**pending)
            pending.clear()
        return out

    monkeypatch.setattr(score, "_compute", computing)
    return arm


def test_a_reimport_while_the_run_computes_fails_it_and_leaves_the_reimported_rows(
        owner, strategyqa_test_items, strategyqa_test_rows, tmp_path, reimport_while_computing):  # noqa: F811
    v1 = _write(tmp_path / "outcomes-v1.jsonl", _tie_lines(strategyqa_test_rows, before_known=False))
    v2 = _write(tmp_path / "outcomes-v2.jsonl", _tie_lines(strategyqa_test_rows, before_known=True))
    study, _ = outcomes_study_create(name="tie then known", dataset=strategyqa_test_items, file=v1, user=owner,
                                     owner=owner)
    first = study_score(study=study, similarity=False)
    assert first.status == ScoreRun.Status.DONE, first.error

    reimport_while_computing(study=study, file=v2, user=owner)
    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.FAILED, run.error
    assert "outcomes were imported again while this run computed (outcomes-v2.jsonl at " in run.error, run.error
    assert "score the study again" in run.error and "Internal error" not in run.error
    # the re-imported rows: the import's values, unscored (nothing of the run stored)
    assert all(r[1] is False and r[5:] == (None, None, None) for r in _rows(study)), _rows(study)
    assert not UnitScore.objects.filter(study=study, score_run=run).exists()

    again = study_score(study=study, similarity=False)
    assert again.status == ScoreRun.Status.DONE, again.error
    fresh_study, _ = outcomes_study_create(name="known from the start", dataset=strategyqa_test_items, file=v2,
                                           user=owner, owner=owner)
    fresh = study_score(study=fresh_study, similarity=False)
    assert fresh.status == ScoreRun.Status.DONE, fresh.error
    assert _rows(study) == _rows(fresh_study)
    assert again.results["utility_shares"]["m-tie"] == fresh.results["utility_shares"]["m-tie"]
    assert again.results["ties"] == fresh.results["ties"] == {"before": 0, "after": 0, "units_with_tie": 0}
    assert scores_staleness(study, again, user=owner)["stale"] is False


def test_a_reimport_that_removes_a_row_while_the_run_computes_fails_it_cleanly(
        scored, owner, tmp_path, reimport_while_computing):  # noqa: F811
    study, _, lines, _ = scored
    reimport_while_computing(study=study, file=_changed(lines, tmp_path), user=owner)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.FAILED
    assert "outcomes were imported again while this run computed (outcomes-v2.jsonl at " in run.error, run.error
    assert "KeyError" not in run.error and "Internal error" not in run.error
    assert UnitScore.objects.filter(study=study).count() == 5
    assert not UnitScore.objects.filter(study=study, score_run=run).exists()
    again = study_score(study=study, similarity=False)
    assert again.status == ScoreRun.Status.DONE, again.error
    assert UnitScore.objects.filter(study=study, score_run=again).count() == 5


def test_a_run_writes_onto_imported_rows_only_what_it_computes(scored):  # noqa: F811
    """A run scoring imported outcomes leaves their imported fields as the import wrote them."""
    study, run, _, _ = scored
    imported = ("before_majority", "after_majority", "before_tie", "after_tie", "n_annotators", "reported_utility")
    before = list(UnitScore.objects.filter(study=study).order_by("pk").values_list(*imported))
    frame = score._imported_frame(study)
    frame["n_annotators"] = 99
    frame["before_tie"] = True
    with pytest.raises(ScoringError, match="imported again while this run computed"):
        score._store_unit_scores(study, frame, run=run)
    assert list(UnitScore.objects.filter(study=study).order_by("pk").values_list(*imported)) == before


def test_the_bundle_copy_of_a_study_stale_by_a_reimport_is_stale_in_its_summary(scored, owner, tmp_path):  # noqa: F811
    study, run, lines, _ = scored
    outcomes_import(study=study, file=_changed(lines, tmp_path), user=owner)
    data = b"".join(bundle_stream(study=study, user=owner))
    copy = bundle_import(file=io.BytesIO(data), name="reimported copy", filename="outcomes-bundle.zip", owner=owner)

    rows = _api(owner).get(f"/api/v1/studies/{copy.pk}/summary/")
    assert rows.status_code == 200, rows.content
    assert {row["source_name"]: row["stale"] for row in rows.json()} == {"m-good": True, "m-bad": True}
    stale = scores_staleness(copy, None, user=owner)
    assert (stale["stale"], stale["whole_run_stale"], stale["stale_units"]) == (True, True, 0), stale
    # the study itself: stale at study level, every source says so
    assert scores_staleness(study, run, user=owner)["whole_run_stale"] is True


def test_a_fresh_run_is_not_whole_run_stale(scored, owner):  # noqa: F811
    study, run, _, _ = scored
    stale = scores_staleness(study, run, user=owner)
    assert (stale["stale"], stale["whole_run_stale"]) == (False, False)
    assert json.loads(json.dumps(stale))["whole_run_stale"] is False
