"""``results["sources"]`` describes each source as it is when the results are computed (backend,
model, training preset or method), and a fine-tuning or Quark job may since have published new
weights under its name. So it also names the checkpoint the source loads now (``checkpoint_hash``,
hashed as each ``generation`` row's), and each row says whether it was made by weights the source
no longer loads (``checkpoint_replaced``), which the report prints. The weights it loads are known
by its trained sources and by its folder's own training record, so deleting the source that
registered them, or adding one over the same folder, replaces nothing."""
from __future__ import annotations

import json

import pytest

from lab.jsontext import json_fingerprint
from scoring.reports.sections import sources_notes
from scoring.services import study_score
from scoring.services.score import generation_hash
from studies.models import RationaleSource
from studies.services.generation.lifecycle import TRAINING_FILE, model_folder
from tests.factories import RationaleFactory, RationaleSourceFactory
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

OLD = {"preset": "paper", "mode": "rationalizer", "job_id": 3}
NEW = {"preset": "small", "mode": "rationalizer", "job_id": 9}
REPLACED = "weights the source no longer loads (its training above is that of the weights it loads now)"


@pytest.fixture(autouse=True)
def model_dir(settings, tmp_path):
    settings.RL_MODEL_DIR = tmp_path / "models"
    settings.RL_MODEL_DIR.mkdir()
    return settings.RL_MODEL_DIR


def _study_of(utility_study, source, checkpoints):
    """``utility_study`` with ``source``'s rationales of its items, the k-th recording ``checkpoints[k]``."""
    study, items, good, _ = utility_study
    for item, checkpoint in zip(items, checkpoints, strict=False):
        RationaleFactory(item=item, source=source, generation_info={
            "model": source.model_name_or_path, "template": "t5_explain", "seed": 0, "checkpoint": checkpoint})
    study.sources.add(source, good)
    study.items.add(*items)
    collect(study, make_unit(study, items[0], source), [("no", "yes")] * 5)
    return study, good


def _rows(results, name) -> dict:
    return {g["checkpoint_hash"]: (g["checkpoint_replaced"], g["n_rationales"])
            for g in results["sources"][name]["generation"]}


def test_rationales_of_a_replaced_checkpoint_are_told_apart_from_the_source_as_it_is_now(utility_study):
    lm = RationaleSourceFactory(name="t5-lm", kind="lm", backend="seq2seq", model_name_or_path="/models/t5",
                                training=NEW)
    old, new = [json_fingerprint(OLD)], [json_fingerprint(NEW)]
    study, good = _study_of(utility_study, lm, [old] * 2 + [new, None])

    results = study_score(study=study, similarity=False).results

    now = generation_hash(new)
    assert (results["sources"]["t5-lm"]["training_preset"], results["sources"]["t5-lm"]["checkpoint_hash"]) == (
        "small", now)
    assert _rows(results, "t5-lm") == {generation_hash(old): (True, 2), now: (False, 1), None: (None, 1)}
    line = next(n for n in sources_notes(results) if n.startswith("Source t5-lm:"))
    assert f"trained with fine-tuning preset small, mode rationalizer; it loads checkpoint {now} now." in line
    assert f"2 made with model /models/t5, template t5_explain, seed 0, checkpoint {generation_hash(old)}, {REPLACED}" in line
    assert line.count("no longer loads") == 1
    assert results["sources"][good.name]["checkpoint_hash"] is None  # imported: no checkpoint


def _trained_folder(name: str, training: dict) -> RationaleSource:
    folder = model_folder(name)
    folder.mkdir()
    (folder / TRAINING_FILE).write_text(json.dumps(training))
    return RationaleSourceFactory(name=name, kind="lm", backend="seq2seq", model_name_or_path=f"models:{name}",
                                  training=training)


@pytest.mark.parametrize("change", ["owner deleted", "owner repointed", "another source added over the folder"])
def test_weights_left_in_place_are_not_called_replaced(utility_study, change):
    """Source C uses A's trained folder and has no training of its own. Deleting A, pointing it
    elsewhere, or adding a source over the same folder with another record leaves the weights C's
    rationales were made by where they were: not replaced (before, every C rationale was)."""
    owner = _trained_folder("ft-a", OLD)
    user = RationaleSourceFactory(name="c", kind="lm", backend="seq2seq", model_name_or_path="models:ft-a")
    recorded = [json_fingerprint(OLD)]
    if change == "owner deleted":
        RationaleSource.objects.filter(pk=owner.pk).delete()
    elif change == "owner repointed":
        RationaleSource.objects.filter(pk=owner.pk).update(model_name_or_path="t5-small", training={})
    else:
        RationaleSourceFactory(name="ft-a-copy", kind="lm", backend="seq2seq", model_name_or_path="models:ft-a",
                               training=NEW)
    study, _ = _study_of(utility_study, user, [recorded] * 3)

    results = study_score(study=study, similarity=False).results

    assert _rows(results, "c") == {generation_hash(recorded): (False, 3)}
    assert "no longer loads" not in " ".join(sources_notes(results))


def test_weights_replaced_in_the_folder_are_called_replaced_without_a_training_line(utility_study):
    _trained_folder("ft-a", OLD)
    user = RationaleSourceFactory(name="c", kind="lm", backend="seq2seq", model_name_or_path="models:ft-a")
    RationaleSource.objects.filter(name="ft-a").update(training=NEW)
    (model_folder("ft-a") / TRAINING_FILE).write_text(json.dumps(NEW))  # a later job published there
    study, _ = _study_of(utility_study, user, [[json_fingerprint(OLD)]] * 2)

    results = study_score(study=study, similarity=False).results

    assert _rows(results, "c") == {generation_hash([json_fingerprint(OLD)]): (True, 2)}
    line = next(n for n in sources_notes(results) if n.startswith("Source c:"))
    assert line.endswith("weights the source no longer loads.")
