"""The migration that keeps model paths under ``RL_MODEL_DIR`` relative to it (``models:<path>``):
existing rows' absolute paths under the current model directory are converted (sources, question
generators, Gen-U predictions' answerer model, jobs' model params), anything else is left as it
is; reversed, the stored forms become absolute paths under the model directory again."""
from __future__ import annotations

import pytest

BEFORE = [("studies", "0018_generationjob_chain")]
AFTER = [("studies", "0019_model_paths_relative_to_model_dir")]


@pytest.mark.django_db(transaction=True)
def test_paths_under_the_model_directory_become_relative_and_back(migrate_to, settings, tmp_path):
    settings.RL_MODEL_DIR = tmp_path / "models"
    (settings.RL_MODEL_DIR / "bobs-t5").mkdir(parents=True)
    bobs = str(settings.RL_MODEL_DIR / "bobs-t5")
    runs = str(settings.RL_MODEL_DIR / "quark-runs" / "job1")
    old = migrate_to(BEFORE)
    Source, Job = old.get_model("studies", "RationaleSource"), old.get_model("studies", "GenerationJob")
    source = Source.objects.create(name="bobs-t5", kind="lm", backend="seq2seq", model_name_or_path=bobs)
    hub = Source.objects.create(name="flan", kind="lm", backend="seq2seq", model_name_or_path="google/flan-t5-small")
    elsewhere = Source.objects.create(name="srv", kind="lm", backend="seq2seq", model_name_or_path="/srv/models/t5")
    job = Job.objects.create(kind="finetune", params={"base_model": bobs, "run_folder": runs, "output_name": "x",
                                                      "policy": {"name": "p", "model": bobs}})

    new = migrate_to(AFTER)
    Source, Job = new.get_model("studies", "RationaleSource"), new.get_model("studies", "GenerationJob")
    assert dict(Source.objects.values_list("pk", "model_name_or_path")) == {
        source.pk: "models:bobs-t5", hub.pk: "google/flan-t5-small", elsewhere.pk: "/srv/models/t5"}
    assert Job.objects.get(pk=job.pk).params == {"base_model": "models:bobs-t5", "run_folder": "models:quark-runs/job1",
                                                 "output_name": "x", "policy": {"name": "p", "model": "models:bobs-t5"}}

    back = migrate_to(BEFORE)
    Source, Job = back.get_model("studies", "RationaleSource"), back.get_model("studies", "GenerationJob")
    assert dict(Source.objects.values_list("pk", "model_name_or_path")) == {
        source.pk: bobs, hub.pk: "google/flan-t5-small", elsewhere.pk: "/srv/models/t5"}
    assert Job.objects.get(pk=job.pk).params == {"base_model": bobs, "run_folder": runs, "output_name": "x",
                                                 "policy": {"name": "p", "model": bobs}}
