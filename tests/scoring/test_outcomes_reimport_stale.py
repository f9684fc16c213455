"""A study of imported outcomes scored, then its outcomes imported again: a re-import that created,
updated or removed outcome rows after the run began reading them makes that run stale by the one
study-level rule (``bundle.export.scores_staleness``, ``outcomes_reimported_since_run``), so
GET /api/v1/studies/<id>/results/ and /summary/, the bundle's settings.json and the planner's pilot
note all say the run no longer matches the outcomes (before, its results.json kept the old
outcomes' numbers while every one of them said not stale: imported rows are never stale by the
per-row rule and the changed rows had no run). A re-import of the same file changes nothing and
leaves the run fresh; scoring again makes it fresh."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
from rest_framework.test import APIClient

from cockpit.precision import pilot_prior_stale_note
from scoring.models import ScoreRun, UnitScore
from scoring.selectors import outcomes_changed_since, score_run_read_at
from scoring.services import outcomes_import, study_score
from scoring.services.bundle import bundle_import, bundle_stream
from scoring.services.bundle.export import scores_staleness
from scoring.services.outcomes import outcomes_study_create
from studies.api.tokens import api_token_create
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


def _lines(rows: list[dict]) -> list[dict]:
    """Outcome lines of the first three questions of the split, for two sources."""
    lines = []
    for n, row in enumerate(rows[:3]):
        gold = bool(row["answer"])
        for source, right in (("m-good", True), ("m-bad", n == 0)):
            lines.append({"question": row["question"], "rationale_source": source, "ground_truth_label": gold,
                          "human_predicted_label_before_rationale": not gold,
                          "human_predicted_label_after_rationale": gold if right else not gold,
                          "rationale_utility": 1 if right else 0})
    return lines


def _write(path, lines: list[dict]):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def owner():
    user, _client = staff_client("olive")
    return user


@pytest.fixture
def scored(owner, strategyqa_test_items, strategyqa_test_rows, tmp_path):
    """(study, run, lines, first file): imported outcomes scored once."""
    lines = _lines(strategyqa_test_rows)
    first = _write(tmp_path / "outcomes.jsonl", lines)
    study, summary = outcomes_study_create(name="reimported outcomes", dataset=strategyqa_test_items, file=first,
                                           user=owner, owner=owner)
    assert summary["created"] == 6
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return study, run, lines, first


def _changed(lines: list[dict], tmp_path):
    """The file again with one outcome changed (m-bad of the second question now helps) and one
    removed (m-bad of the third question)."""
    changed = [dict(line) for line in lines[:5]]
    changed[3]["human_predicted_label_after_rationale"] = changed[3]["ground_truth_label"]
    changed[3]["rationale_utility"] = 1
    return _write(tmp_path / "outcomes-v2.jsonl", changed)


def _api(user) -> APIClient:
    _, key = api_token_create(user=user, name="test", read_only=True, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _bundle_stale(study, user) -> dict:
    data = b"".join(bundle_stream(study=study, user=user))
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        name = next(n for n in bundle.namelist() if n.endswith("settings.json"))
        return json.loads(bundle.read(name))["scores_stale"]


def test_a_reimport_that_changes_outcomes_makes_the_run_stale_everywhere(scored, owner, tmp_path):
    study, run, lines, _ = scored
    fresh = scores_staleness(study, run, user=owner)
    assert (fresh["stale"], fresh.get("outcomes_reimported_since_run")) == (False, None) and "note" not in fresh

    summary = outcomes_import(study=study, file=_changed(lines, tmp_path), user=owner)
    assert (summary["created"], summary["updated"], summary["removed"]) == (0, 1, 1)
    assert UnitScore.objects.filter(study=study, score_run=None).count() == 1  # the changed row: unscored

    stale = scores_staleness(study, run, user=owner)
    assert stale["stale"] is True, stale
    assert stale["score_run"] == run.pk
    assert "outcomes were imported again after the run read them" in stale["note"]
    assert "outcomes were imported again" in stale["rule"]
    reimported = stale["outcomes_reimported_since_run"]
    assert {k: reimported[k] for k in ("filename", "created", "updated", "removed")} == {
        "filename": "outcomes-v2.jsonl", "created": 0, "updated": 1, "removed": 1}
    assert reimported["imported_at"]
    record = outcomes_changed_since(study=study, since=score_run_read_at(run))
    assert record is not None and record.filename == "outcomes-v2.jsonl"

    api = _api(owner)
    results = api.get(f"/api/v1/studies/{study.pk}/results/")
    assert results.status_code == 200, results.content
    assert results.json()["scores_stale"]["stale"] is True
    assert results.json()["scores_stale"]["outcomes_reimported_since_run"]["removed"] == 1
    rows = api.get(f"/api/v1/studies/{study.pk}/summary/")
    assert rows.status_code == 200, rows.content
    assert {row["source_name"]: row["stale"] for row in rows.json()} == {"m-good": True, "m-bad": True}

    assert _bundle_stale(study, owner)["stale"] is True

    again = study_score(study=study, similarity=False)
    assert again.status == ScoreRun.Status.DONE, again.error
    fresh = scores_staleness(study, again, user=owner)
    assert (fresh["stale"], fresh.get("outcomes_reimported_since_run")) == (False, None)
    rows = _api(owner).get(f"/api/v1/studies/{study.pk}/summary/").json()
    assert {row["source_name"]: row["stale"] for row in rows} == {"m-good": False, "m-bad": False}


def test_a_reimport_of_the_same_file_leaves_the_run_fresh(scored, owner):
    study, run, _, first = scored
    summary = outcomes_import(study=study, file=first, user=owner)
    assert (summary["created"], summary["updated"], summary["removed"]) == (0, 0, 0)

    stale = scores_staleness(study, run, user=owner)
    assert (stale["stale"], stale.get("outcomes_reimported_since_run")) == (False, None) and "note" not in stale
    assert outcomes_changed_since(study=study, since=score_run_read_at(run)) is None
    rows = _api(owner).get(f"/api/v1/studies/{study.pk}/summary/").json()
    assert {row["source_name"]: row["stale"] for row in rows} == {"m-good": False, "m-bad": False}


def test_the_planners_pilot_note_says_the_pilot_outcomes_were_imported_again(scored, owner, tmp_path):
    study, run, lines, _ = scored
    assert pilot_prior_stale_note(prior_key=f"pilot:{study.pk}", user=owner) == ""

    outcomes_import(study=study, file=_changed(lines, tmp_path), user=owner)

    note = pilot_prior_stale_note(prior_key=f"pilot:{study.pk}", user=owner)
    assert f"The pilot's latest scored run ({run.pk}) no longer matches its outcomes" in note, note
    assert "its outcomes were imported again since (outcomes-v2.jsonl: 0 created, 1 updated, 1 removed)" in note
    assert "score the pilot again" in note


def test_a_bundle_copy_of_the_stale_study_stays_stale(scored, owner, tmp_path):
    """The bundle of a study whose run is stale by a re-import says so at study level; its copy,
    whose imported outcomes name no unit, keeps saying so until scored there."""
    study, run, lines, _ = scored
    outcomes_import(study=study, file=_changed(lines, tmp_path), user=owner)
    data = b"".join(bundle_stream(study=study, user=owner))
    copy = bundle_import(file=io.BytesIO(data), name="reimported copy", filename="outcomes-bundle.zip", owner=owner)

    stale = scores_staleness(copy, None, user=owner)
    assert stale["stale"] is True and stale["score_run"] == run.pk, stale
    assert "the bundle called its scores stale at study level" in stale["scores_from"]
