"""Scoring tells faithfulness probabilities of two checkpoints of one task model apart: the job
records the task model's ``checkpoint`` with each value (``studies.services.generation.faithfulness``)
and ``computed_with`` groups by it (``score.COMPUTED_WITH_KEYS``), so weights a fine-tuning job
published later under the same path do not read as the task model the first job ran. Values stored
before the checkpoint was recorded still score, as their own group, and a study bundle carries the
checkpoint to its copy."""
from __future__ import annotations

import io

import pytest

from lab.jsontext import json_fingerprint
from scoring.services import study_score
from scoring.services.bundle import bundle_import
from studies.models import Rationale, RationaleSource, Study
from studies.services import generation
from tests.scoring.test_bundle import _bundle, _worked_study
from tests.scoring.test_services_score import _faithfulness_study, collect, make_unit
from tests.studies.lm.conftest import model_dir  # noqa: F401 (autouse: each test its own RL_MODEL_DIR)
from tests.studies.lm.test_checkpoint_replaced import _xavier_replaces, lab  # noqa: F401 (the fixture: ft-x)
from tests.studies.lm.test_faithfulness_rights import StubScorer

pytestmark = pytest.mark.django_db


def _run(source, items, task_model: str):
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False,
        params={"task_model": task_model, "task_backend": "seq2seq"}).pk)
    assert (job.status, job.done, job.failed) == ("done", len(items), 0), job.error
    return job


def test_two_checkpoints_under_one_task_model_are_two_computed_with_groups(utility_study, lab, monkeypatch):  # noqa: F811
    monkeypatch.setattr("studies.services.generation.faithfulness.LabelScorer", StubScorer)
    study, items, good = _faithfulness_study(utility_study)
    Rationale.objects.filter(source=good).update(highlights=[[0, 3]])
    ft = lab["source"]
    path, first = ft.model_name_or_path, json_fingerprint(ft.training)
    _run(good, items[:2], path)
    _xavier_replaces(lab)  # new weights in ft-x's folder, under the same path
    second = json_fingerprint(RationaleSource.objects.get(pk=ft.pk).training)
    _run(good, items[2:3], path)
    # One value as stored before the job recorded the checkpoint: it still scores, as its own group.
    old = Rationale.objects.get(source=good, item=items[3])
    job_value = Rationale.objects.get(source=good, item=items[0]).faithfulness
    Rationale.objects.filter(pk=old.pk).update(faithfulness={
        k: v for k, v in job_value.items() if k not in ("checkpoint", "device")})
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.status == "done", run.error
    per_source = run.results["faithfulness"]["per_source"]["good-lm"]
    assert per_source["n"] == 4
    groups = {row["checkpoint"]: row["n_rationales"] for row in per_source["computed_with"]}
    assert groups == {f'["{first}"]': 2, f'["{second}"]': 1, None: 1}
    assert {row["task_model"] for row in per_source["computed_with"]} == {path}


def test_a_bundle_carries_the_checkpoint_and_the_copy_scores_the_same_groups():
    study = _worked_study()
    source = study.sources.order_by("pk").first()
    Study.objects.filter(pk=study.pk).update(faithfulness_enabled=True)
    RationaleSource.objects.filter(pk=source.pk).update(has_highlights=True)
    rationales = list(Rationale.objects.filter(source=source, item__in=study.items.all()).order_by("item_id"))
    checkpoints = [["aaaaaaaaaaaa"], ["bbbbbbbbbbbb"], None, "no key"]  # the last: stored before it was recorded
    for n, rationale in enumerate(rationales):
        value = {"p_full": 0.9, "p_highlight": 0.6 + n / 20, "p_without": 0.3, "y_hat_from": "full",
                 "highlights": [[0, 2]], "task_model": "models:ft-x", "task_backend": "seq2seq", "job_id": 1}
        if checkpoints[n % len(checkpoints)] != "no key":
            value["checkpoint"] = checkpoints[n % len(checkpoints)]
        Rationale.objects.filter(pk=rationale.pk).update(highlights=[[0, 2]], faithfulness=value)
    study.refresh_from_db()
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error
    groups = {row["checkpoint"] for row in original.results["faithfulness"]["per_source"][source.name]["computed_with"]}
    assert len(rationales) == 4 and groups == {'["aaaaaaaaaaaa"]', '["bbbbbbbbbbbb"]', None}

    data, faithfulness = _bundle(study), original.results["faithfulness"]
    study.delete()
    Rationale.objects.filter(pk__in=[r.pk for r in rationales]).delete()
    copy = bundle_import(file=io.BytesIO(data), name="faith-copy", owner=None)

    kept = Rationale.objects.get(source__name=source.name, item__external_id=rationales[0].item.external_id)
    assert kept.faithfulness["checkpoint"] == ["aaaaaaaaaaaa"]
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert rescored.results["faithfulness"] == faithfulness
