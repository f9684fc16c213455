"""A fine-tuning or Quark job that registers under an existing source's name publishes new weights
into the same folder (``lifecycle.model_folder_publish``) and leaves the source's model path as it
was: only its training record, which names the job, changes (``lifecycle.model_source_register``).
A job queued on that source, on a Gen-U answerer or on a question generator pointed at its folder
records which checkpoint it was started on (``inputs.job_settings_snapshot``) and is cancelled,
naming it, when another researcher replaces the weights under it (``inputs.job_settings_refusal``).
"""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from studies.models import (
    GeneralizationQuestion,
    GenerationJob,
    GenUPrediction,
    QuestionGenerator,
    RationaleSource,
)
from studies.services.generation import generation_job_create, generation_job_run, generation_job_run_batch
from studies.services.generation.finetune import training_record
from studies.services.generation.inputs import job_settings_refusal
from studies.services.generation.lifecycle import (
    TRAINING_FILE,
    model_folder,
    model_folder_publish,
    model_source_register,
)
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

from .test_genu_answerer_source import explained_items_with_valid_questions
from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db

REPLACED = ("Cancelled: the checkpoint of {what} changed since the job was created (its model weights were replaced "
            "by training job {job}); start a new job (a job runs only on the weights it was started with).")


@pytest.fixture
def lab():
    """Rita, who queues jobs on the library's sources and generators; Xavier, who may change the
    library's sources and fine-tune into them; a dataset both read; and the source ``ft-x``, whose
    checkpoint the operator's fine-tuning job registered."""
    dataset = DatasetFactory(name="shared-ds")
    for i in range(2):
        ItemFactory(dataset=dataset, split="dev", question=f"Is dev fact {i} true?")
    _train_pool(dataset)
    User = get_user_model()
    rita = grant(User.objects.create_user("rita", password="pw", is_staff=True),
                 "studies.add_generationjob", "studies.view_generationjob", "studies.view_dataset",
                 "studies.view_item", "studies.view_rationalesource", "studies.view_questiongenerator",
                 "studies.view_generalizationquestion")
    xavier = grant(User.objects.create_user("xavier", password="pw", is_staff=True),
                   "studies.add_generationjob", "studies.view_generationjob", "studies.view_dataset",
                   "studies.view_item", "studies.view_rationalesource", "studies.change_rationalesource")
    first = _finetune_job(dataset, None)
    source = _publish(first, None)
    return {"dataset": dataset, "rita": rita, "xavier": xavier, "source": source, "first": first}


def _finetune_job(dataset, user, name: str = "ft-x") -> GenerationJob:
    return generation_job_create(kind="finetune", dataset=dataset, split="train", user=user, enqueue=False,
                                 params={"mode": "answer_i", "base_model": "t5-base", "output_name": name})


def _publish(job: GenerationJob, user) -> RationaleSource:
    """What ``finetune.finetune_job_run`` does once ``job`` has trained: publish the checkpoint into
    its output folder, then register it under its output name for ``user``."""
    training = training_record(job=job, params=job.params, final_loss=0.5, device="cpu")

    def write(folder):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"weights_of_job": job.pk}))
        (folder / TRAINING_FILE).write_text(json.dumps(training))

    folder = model_folder(job.params["output_name"])
    model_folder_publish(folder, write, partial_name=f"{folder.name}.job{job.pk}.partial")
    return model_source_register(name=job.params["output_name"], backend=RationaleSource.Backend.SEQ2SEQ,
                                 folder=folder, user=user, training=training, seed=int(job.params["seed"]),
                                 decoding={"do_sample": False, "max_new_tokens": 100, "num_return_sequences": 1})


def _ritas_rationale_job(lab) -> GenerationJob:
    return generation_job_create(kind="rationales", source=lab["source"], dataset=lab["dataset"], split="dev",
                                 user=lab["rita"], enqueue=False)


def _xavier_replaces(lab, name: str = "ft-x") -> GenerationJob:
    job = _finetune_job(lab["dataset"], lab["xavier"], name)
    _publish(job, lab["xavier"])
    return job


def test_a_checkpoint_replaced_under_a_queued_job_cancels_it(lab):
    """The audit's scenario: Rita queues a job on ``ft-x``; Xavier's fine-tuning job registers
    under the same name, so the source's model path is the same text as before but its weights
    are his; the job is cancelled at its first batch, naming the job that replaced them."""
    job = _ritas_rationale_job(lab)
    assert job_settings_refusal(job) == ""
    before = RationaleSource.objects.get(pk=lab["source"].pk).model_name_or_path
    replacing = _xavier_replaces(lab)
    assert RationaleSource.objects.get(pk=lab["source"].pk).model_name_or_path == before  # what the snapshot saw
    expected = REPLACED.format(what="source 'ft-x'", job=replacing.pk)
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == expected
    assert generation_job_run_batch(job_id=job.pk) is False  # stopped before any model is loaded
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == expected
    assert not lab["source"].rationales.exists()


def test_a_job_queued_after_the_replacement_or_beside_another_register_goes_on(lab):
    replacing = _xavier_replaces(lab)
    job = _ritas_rationale_job(lab)  # started on Xavier's weights: those are what it records
    _xavier_replaces(lab, name="ft-y")  # another checkpoint, another folder
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == ""
    assert RationaleSource.objects.get(name="ft-x").training["job_id"] == replacing.pk


def test_a_question_generator_pointed_at_the_checkpoint_folder_is_stopped_too(lab):
    """A generator names the folder by path and has no training record of its own: the snapshot
    records the training of the source whose folder it is."""
    generator = QuestionGenerator.objects.create(name="ft-questions", backend="seq2seq",
                                                 model_name_or_path=lab["source"].model_name_or_path)
    job = generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                                split="dev", user=lab["rita"], enqueue=False)
    assert job_settings_refusal(job) == ""
    replacing = _xavier_replaces(lab)
    expected = REPLACED.format(what="question generator 'ft-questions'", job=replacing.pk)
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == expected
    assert generation_job_run_batch(job_id=job.pk) is False
    job.refresh_from_db()
    assert (job.status, job.error) == (GenerationJob.Status.CANCELLED, expected)
    assert not GeneralizationQuestion.objects.filter(origin=generator.origin).exists()


def test_a_genu_answerer_replaced_while_the_job_waits_cancels_it(lab):
    source, items = explained_items_with_valid_questions()
    job = generation_job_create(kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None,
                                enqueue=False, params={"answerer_i": lab["source"].pk, "answerer_ir": lab["source"].pk})
    replacing = _xavier_replaces(lab)
    job = generation_job_run(job_id=job.pk)
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == REPLACED.format(what="answerer_i source 'ft-x'", job=replacing.pk)
    assert not GenUPrediction.objects.exists()


def _snapshot_from_before_checkpoints(job: GenerationJob) -> GenerationJob:
    # Such a job cannot be made through the services any more: drop what they record now.
    params = dict(job.params)
    params["settings_snapshot"] = {role: {k: v for k, v in recorded.items() if k != "checkpoint"}
                                   for role, recorded in params["settings_snapshot"].items()}
    GenerationJob.objects.filter(pk=job.pk).update(params=params)
    return GenerationJob.objects.get(pk=job.pk)


def test_a_job_recorded_before_checkpoints_were_is_stopped_by_a_later_training_job_only(lab):
    """A snapshot without the checkpoint does not cancel its job by its absence: the job is stopped
    when a training job created after it now holds the weights, which must have replaced them
    after it was queued."""
    job = _snapshot_from_before_checkpoints(_ritas_rationale_job(lab))
    assert job_settings_refusal(job) == ""  # the operator's checkpoint, from before the job
    replacing = _xavier_replaces(lab)
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == REPLACED.format(
        what="source 'ft-x'", job=replacing.pk)


def test_a_source_added_over_the_same_folder_replaces_no_weights_and_cancels_nothing(lab):
    """A new source row pointed at ``ft-x``'s folder with its training record (the admin lets a
    researcher write one; a bundle import copies one into a renamed source) changes no weight on
    disk: the queued job goes on. Counted before, any new row holding the folder cancelled it."""
    from studies.services.content import content_row_save

    job = _ritas_rationale_job(lab)
    copy = RationaleSource(name="ft-x-copy", kind="lm", backend=RationaleSource.Backend.SEQ2SEQ,
                           model_name_or_path=lab["source"].model_name_or_path, training=lab["source"].training)
    content_row_save(user=None, obj=copy, changed=())
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == ""


def test_a_job_recorded_before_model_paths_were_stored_relative_runs_on_after_the_upgrade(lab):
    """A job queued before the upgrade recorded its source's folder by its absolute path; migration
    ``studies.0019`` converts the source to ``models:ft-x`` but not the job's record, and the job was
    cancelled as if the source had been pointed elsewhere. The same folder is the same setting."""
    from lab.jsontext import json_fingerprint
    from studies.services.generation.inputs import SETTINGS_SNAPSHOT, job_settings_refusal
    from studies.services.model_paths import model_location

    source = lab["source"]
    assert source.model_name_or_path == "models:ft-x"
    job = _ritas_rationale_job(lab)
    recorded = job.params[SETTINGS_SNAPSHOT]["source"]
    # as it was recorded then: the folder's absolute path
    recorded["model_name_or_path"] = json_fingerprint(model_location(source.model_name_or_path))
    GenerationJob.objects.filter(pk=job.pk).update(params=job.params)
    job.refresh_from_db()

    assert job_settings_refusal(job) == ""
    RationaleSource.objects.filter(pk=source.pk).update(model_name_or_path="models:elsewhere")
    job.refresh_from_db()
    assert "model_name_or_path" in job_settings_refusal(job)  # another folder still cancels it


def test_a_job_runs_on_where_the_model_folder_is_elsewhere(lab, settings, tmp_path):
    """The LM worker's RL_MODEL_DIR may be another path than the web host's (another checkout, a
    restore): the job's record names the folder as stored (``models:ft-x``), not as this host
    places it, so it is not cancelled as if repointed."""
    from studies.services.generation.inputs import job_settings_refusal

    job = _ritas_rationale_job(lab)
    assert job_settings_refusal(job) == ""
    settings.RL_MODEL_DIR = tmp_path / "elsewhere" / "models"
    job.refresh_from_db()
    assert job_settings_refusal(job) == ""


GONE = ("Cancelled: the checkpoint of {what} changed since the job was created (its model weights are no longer "
        "those it was started on); start a new job (a job runs only on the weights it was started with).")


def _generator_job_on_the_folder(lab) -> GenerationJob:
    generator = QuestionGenerator.objects.create(name="ft-questions", backend="seq2seq",
                                                 model_name_or_path=lab["source"].model_name_or_path)
    return generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                                 split="dev", user=lab["rita"], enqueue=False)


@pytest.mark.parametrize("how", ["deleted", "pointed elsewhere"])
def test_the_folders_source_deleted_or_repointed_leaves_a_job_on_its_untouched_weights_going(lab, how):
    """The checkpoint a job recorded is known by the source whose folder it is; with that row deleted
    or pointed at another model, the folder's own training record says the weights are those the
    job started on (before, the job was cancelled saying they were not)."""
    job = _generator_job_on_the_folder(lab)
    if how == "deleted":
        RationaleSource.objects.filter(pk=lab["source"].pk).delete()
    else:
        RationaleSource.objects.filter(pk=lab["source"].pk).update(model_name_or_path="t5-small")
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == ""


def test_the_folders_source_deleted_and_its_weights_replaced_still_cancels(lab):
    job = _generator_job_on_the_folder(lab)
    RationaleSource.objects.filter(pk=lab["source"].pk).delete()
    folder = model_folder("ft-x")
    record = json.loads((folder / TRAINING_FILE).read_text())
    (folder / TRAINING_FILE).write_text(json.dumps({**record, "final_loss": 0.25}))  # other weights, same place
    assert job_settings_refusal(GenerationJob.objects.get(pk=job.pk)) == GONE.format(
        what="question generator 'ft-questions'")
