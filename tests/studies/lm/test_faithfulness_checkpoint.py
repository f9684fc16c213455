"""A faithfulness job loads its task model by path (``params["task_model"]``), and a fine-tuning or
Quark job registering under the name of the source whose folder that is publishes new weights under
the same path (``lifecycle.model_folder_publish``: only the source's training record changes). The
job records the task model's checkpoint when it is made (``inputs.job_settings_snapshot``,
``inputs.MODEL_ROLES``) and with each probability it stores (``checkpoint``, as a rationale job's),
and is cancelled, naming the source, when the weights are replaced between its batches
(``inputs.job_settings_refusal``): otherwise its sufficiency and comprehensiveness mix two
checkpoints under one task model. A task model that no job here trained (a plain folder, a hub
name) has no checkpoint to record: the job records none and runs."""
from __future__ import annotations

import json

import pytest

from lab.jsontext import json_fingerprint
from studies import demo
from studies.faithfulness_rules import faithfulness_problems
from studies.models import GenerationJob, Rationale, RationaleSource
from studies.services import generation
from studies.services.generation import generation_job_run_batch
from studies.services.generation.inputs import SETTINGS_SNAPSHOT, job_settings_refusal
from studies.services.generation.lifecycle import TRAINING_FILE, model_folder
from studies.services.importers import rationales_import
from studies.services.model_paths import folder_training_record

from .test_checkpoint_replaced import REPLACED, _xavier_replaces, lab  # noqa: F401 (the fixture: ft-x, trained here)
from .test_faithfulness import demo_items, highlight_file
from .test_faithfulness_rights import StubScorer

pytestmark = pytest.mark.django_db


@pytest.fixture
def highlighter(tmp_path, monkeypatch):
    """The demo's test items with a highlight source's rationales; the task model a stub that loads
    nothing (the checkpoint is the job's record, whatever the weights say)."""
    monkeypatch.setattr("studies.services.generation.faithfulness.LabelScorer", StubScorer)
    items = [i for i in demo_items() if i.split == "test"][:3]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    return RationaleSource.objects.get(name="highlighter"), items


def _faithfulness_job(source, items, task_model: str) -> GenerationJob:
    return generation.generation_job_create(
        kind="faithfulness", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False, batch_size=1,
        params={"task_model": task_model, "task_backend": "seq2seq"})


def _stored(source) -> list[dict]:
    return [f for f in Rationale.objects.filter(source=source).order_by("item_id").values_list("faithfulness", flat=True)
            if f]


def test_the_task_models_checkpoint_replaced_between_batches_cancels_the_job(lab, highlighter):  # noqa: F811
    """The audit's probe: a faithfulness job on ``ft-x``'s folder, one item a batch; Xavier's
    fine-tuning job registers under ``ft-x`` after the first batch. The job stops before the second,
    naming the source, and what it stored names the checkpoint it was computed with."""
    source, items = highlighter
    ft = lab["source"]
    job = _faithfulness_job(source, items, ft.model_name_or_path)
    first = json_fingerprint(ft.training)
    assert job.params[SETTINGS_SNAPSHOT]["task_model"] == {"checkpoint": {str(ft.pk): first}}

    assert generation_job_run_batch(job_id=job.pk) is True
    stored = _stored(source)
    assert len(stored) == 1 and stored[0]["checkpoint"] == [first] and stored[0]["job_id"] == job.pk
    assert faithfulness_problems(stored[0]) == {}

    replacing = _xavier_replaces(lab)
    assert RationaleSource.objects.get(pk=ft.pk).model_name_or_path == ft.model_name_or_path  # the same path
    expected = REPLACED.format(what=f"task model {ft.model_name_or_path!r} (the checkpoint folder of source 'ft-x')",
                               job=replacing.pk)
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == expected
    assert generation_job_run_batch(job_id=job.pk) is False
    job.refresh_from_db()
    assert (job.status, job.error) == (GenerationJob.Status.CANCELLED, expected)
    assert _stored(source) == stored  # nothing computed with the new weights under the old job


def test_a_job_made_on_the_new_checkpoint_records_it_and_runs(lab, highlighter):  # noqa: F811
    source, items = highlighter
    _xavier_replaces(lab)
    ft = RationaleSource.objects.get(pk=lab["source"].pk)
    job = generation.generation_job_run(job_id=_faithfulness_job(source, items, ft.model_name_or_path).pk)
    assert (job.status, job.done, job.failed) == ("done", len(items), 0), job.error
    assert {tuple(f["checkpoint"]) for f in _stored(source)} == {(json_fingerprint(ft.training),)}


@pytest.mark.parametrize("task_model", ["/models/task", "org/some-hub-model"])
def test_a_task_model_no_job_here_trained_records_no_checkpoint_and_is_not_refused(lab, highlighter, task_model):  # noqa: F811
    """A plain folder or a hub name: nothing is known of its weights here, so none is recorded (None,
    as a rationale job records for such a model) and a training job elsewhere cancels nothing."""
    source, items = highlighter
    job = _faithfulness_job(source, items, task_model)
    assert job.params[SETTINGS_SNAPSHOT]["task_model"] == {"checkpoint": {}}
    _xavier_replaces(lab)  # another folder's weights
    job = generation.generation_job_run(job_id=job.pk)
    assert (job.status, job.done, job.failed) == ("done", len(items), 0), job.error
    stored = _stored(source)
    assert len(stored) == len(items) and all(f["checkpoint"] is None and f["task_model"] == task_model
                                             for f in stored)
    assert all(faithfulness_problems(f) == {} for f in stored)


def test_a_job_queued_before_the_checkpoint_was_recorded_is_stopped_by_a_later_training_job(lab, highlighter):  # noqa: F811
    """A faithfulness job made before this record (its snapshot holds nothing of the task model) is
    stopped, as other kinds' older snapshots are, once a training job created after it holds the
    folder's weights; until then it runs on."""
    source, items = highlighter
    ft = lab["source"]
    job = _faithfulness_job(source, items, ft.model_name_or_path)
    params = {**job.params, SETTINGS_SNAPSHOT: {}}
    GenerationJob.objects.filter(pk=job.pk).update(params=params)
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == ""
    replacing = _xavier_replaces(lab)
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == REPLACED.format(
        what=f"task model {ft.model_name_or_path!r} (the checkpoint folder of source 'ft-x')", job=replacing.pk)


def test_a_stored_checkpoint_that_is_not_fingerprints_breaks_the_rule():
    base = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3}
    assert faithfulness_problems({**base, "checkpoint": ["abc"]}) == {}
    assert faithfulness_problems({**base, "checkpoint": None}) == {}
    assert faithfulness_problems(base) == {}  # stored before the checkpoint was recorded
    assert "checkpoint" in faithfulness_problems({**base, "checkpoint": [1]})
    assert "checkpoint" in faithfulness_problems({**base, "checkpoint": {"a": "b"}})


def test_the_task_models_folder_source_deleted_leaves_the_job_on_its_untouched_weights(lab, highlighter):  # noqa: F811
    """The task model is known as ``ft-x``'s checkpoint; with that source deleted, the folder's own
    training record (``model_paths.folder_training_record``) says its weights are those the job
    recorded, and it goes on; with that record changed too, it is stopped."""
    source, items = highlighter
    job = _faithfulness_job(source, items, lab["source"].model_name_or_path)
    RationaleSource.objects.filter(pk=lab["source"].pk).delete()
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == ""
    record = model_folder("ft-x") / TRAINING_FILE
    record.write_text(json.dumps({**json.loads(record.read_text()), "final_loss": 0.1}))
    assert "its model weights are no longer those it was started on" in job_settings_refusal(
        GenerationJob.objects.get(pk=job.pk))


def test_a_task_model_file_inside_the_folder_reads_the_folders_record(lab):  # noqa: F811
    folder = model_folder("ft-x")
    assert folder_training_record(str(folder / "config.json")) == lab["source"].training
    assert folder_training_record(str(folder.parent)) is None and folder_training_record("t5-small") is None
