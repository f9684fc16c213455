"""Fine-tuning T5 (rationalizer and Gen-U answerers) from a local base model; checkpoints are
registered as sources and load through the generation backend."""
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from studies.lm import backends, parsing, templates
from studies.models import GeneralizationQuestion, GenerationJob, RationaleSource
from studies.services.generation import GenerationError, finetune, finetune_t5, generation_job_run_batch
from studies.services.model_paths import model_location

pytestmark = [pytest.mark.lm, pytest.mark.django_db]
pytest.importorskip("torch")


def test_answerer_checkpoint_is_saved_registered_and_loadable(lm_models, train_items, strategyqa_dataset):
    GeneralizationQuestion.objects.create(item=train_items[0], qtype="rephrase", text="Reworded?", answer="yes")
    job = finetune_t5(dataset=strategyqa_dataset, mode="answer_ir", base_model=str(lm_models["t5"]),
                               steps=4, batch_size=2, output_name="fir-test")
    assert (job.status, job.done, job.total) == ("done", 4, 4)
    assert job.params["examples"] == len(train_items)  # the paper's: the items only, not the generalization question
    source = RationaleSource.objects.get(pk=job.params["output_source_id"])
    assert (source.name, source.kind, source.backend) == ("fir-test", "lm", "seq2seq")
    assert source.model_name_or_path == "models:fir-test"  # kept relative to RL_MODEL_DIR (model_path_stored)
    assert "F^IR" in source.description and "4 steps" in source.description
    assert "preset 'paper-answerers'" in source.description and "on gold rationales of strategyqa train" in source.description
    # The settings and data used travel with the checkpoint: on the source and in its folder.
    assert source.training["preset"] == "paper-answerers" and source.training["overrides"] == ["batch_size"]
    assert (source.training["steps"], source.training["lr"], source.training["job_id"]) == (4, 3e-5, job.pk)
    assert source.training["data"] == {"dataset": "strategyqa", "split": "train", "items": len(train_items),
                                       "examples_from_items": len(train_items), "generalization_questions": 0,
                                       "rationales": "gold rationales of strategyqa train"}
    saved = json.loads((Path(model_location(source.model_name_or_path)) / finetune.TRAINING_FILE).read_text())
    assert saved == source.training
    backend = backends.Seq2SeqBackend(source.model_name_or_path)
    out = backend.generate([templates.t5_answer_input(templates.PromptItem(
        question="Is ice cold?", choices=(("yes", "Yes"), ("no", "No")), dataset="strategyqa"))],
        backends.Decoding(max_new_tokens=6))
    assert len(out) == 1 and isinstance(out[0][0], str)
    assert generation_job_run_batch(job_id=job.pk) is False  # finished: nothing runs again
    assert RationaleSource.objects.filter(name="fir-test").count() == 1


def test_n_shot_rationalizer_through_the_command(lm_models, train_items, strategyqa_dataset):
    out = StringIO()
    call_command("finetune_t5", "--dataset", "strategyqa", "--mode", "rationalizer", "--base-model",
                 str(lm_models["t5"]), "--preset", "feb-few-shot", "--n-shot", "8", "--steps", "3", "--output-name",
                 "rat-8shot", stdout=out)
    assert "registered as source 'rat-8shot'" in out.getvalue() and "preset 'feb-few-shot'" in out.getvalue()
    job = GenerationJob.objects.get(kind="finetune")
    assert job.params["examples"] == 8 and job.params["n_shot"] == 8
    # FEB's settings, but for the shots and steps asked here, and it says so.
    assert (job.params["lr"], job.params["batch_size"], job.params["epochs"]) == (3e-5, 4, 25)
    assert job.params["overrides"] == ["n_shot"] and job.params["base_model_in_paper"] == "t5-3b"
    source = RationaleSource.objects.get(name="rat-8shot")
    assert source.decoding["max_new_tokens"] == 100
    raw = backends.Seq2SeqBackend(source.model_name_or_path).generate(
        [templates.t5_explain_input(templates.PromptItem(question="Is ice cold?", choices=(("yes", "Yes"), ("no", "No")),
                                                         dataset="strategyqa"))], backends.Decoding(max_new_tokens=20))
    assert isinstance(parsing.parse_t5_rationale(raw[0][0], templates.PromptItem(
        question="q", choices=(("yes", "Yes"), ("no", "No")))), (parsing.ParsedRationale, parsing.ParseFailure))


def test_bad_requests_are_clear_errors(train_items, strategyqa_dataset):
    with pytest.raises(CommandError, match="no dataset named 'nope'"):
        call_command("finetune_t5", "--dataset", "nope", "--base-model", "x")
    with pytest.raises(GenerationError, match="n_shot 500 is more than the 60 items"):
        finetune_t5(dataset=strategyqa_dataset, mode="rationalizer", base_model="x", n_shot=500)
    with pytest.raises(GenerationError, match="unknown fine-tuning mode"):
        finetune_t5(dataset=strategyqa_dataset, mode="quark", base_model="x")
    with pytest.raises(GenerationError, match="unknown fine-tuning preset 'fast'"):
        finetune_t5(dataset=strategyqa_dataset, mode="answer_i", base_model="x", preset="fast")
    with pytest.raises(GenerationError, match="the paper used t5-base"):
        finetune_t5(dataset=strategyqa_dataset, mode="answer_i", base_model="")


def test_missing_base_model_fails_the_job_with_its_path(train_items, strategyqa_dataset, tmp_path):
    job = finetune_t5(dataset=strategyqa_dataset, mode="answer_i", base_model=str(tmp_path / "missing"),
                               steps=2)
    assert job.status == "failed" and "cannot load base model" in job.error and "missing" in job.error


def test_a_job_that_crashed_between_publishing_and_registering_finishes_when_run_again(
        lm_models, train_items, strategyqa_dataset, monkeypatch, admin_user):
    """The folder a job published is its own (its training record names the job), so running the
    job again replaces it and registers the source instead of refusing the folder as taken."""
    from studies.services.generation import generation_job_resume, lifecycle

    real = finetune.model_source_register

    def crash(**kwargs):
        raise RuntimeError("worker killed after publishing")

    monkeypatch.setattr(finetune, "model_source_register", crash)
    with pytest.raises(RuntimeError):
        finetune_t5(dataset=strategyqa_dataset, mode="rationalizer", base_model=str(lm_models["t5"]), steps=2,
                    batch_size=2, output_name="crashed-once", user=admin_user)
    job = GenerationJob.objects.get(kind="finetune")
    folder = lifecycle.model_folder("crashed-once")
    assert lifecycle.published_by(folder) == job.pk and not RationaleSource.objects.filter(name="crashed-once").exists()
    # Another job may not take that folder: it holds a model, whoever's it is.
    with pytest.raises(GenerationError, match="is already taken by another model"):
        finetune_t5(dataset=strategyqa_dataset, mode="rationalizer", base_model=str(lm_models["t5"]), steps=2,
                    batch_size=2, output_name="crashed-once", user=admin_user, run_now=False)
    monkeypatch.setattr(finetune, "model_source_register", real)
    job.refresh_from_db()
    if job.status != "running":
        generation_job_resume(job=job, user=admin_user, enqueue=False)
    generation_job_run_batch(job_id=job.pk)
    job.refresh_from_db()
    assert (job.status, job.error) == ("done", "")
    source = RationaleSource.objects.get(name="crashed-once")
    assert model_location(source.model_name_or_path) == str(folder) and lifecycle.published_by(folder) == job.pk
