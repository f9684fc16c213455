"""Registering the real-model demo's source (``studies.services.demo_lm.demo_lm_register``) goes
through the shared content rule (``studies.services.content``): a source already named as the
demo's that an open study lists keeps what that study shows (its kind), and nothing is written."""
from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies import demo
from studies.models import Dataset, QuestionGenerator, RationaleSource
from studies.services.demo_lm import SOURCE_NAME, demo_lm_register
from studies.services.generation import GenerationError
from studies.services.importers import rationales_import
from studies.services.studies import study_create
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

MODEL = Path("/models/smollm2.gguf")  # never read: registering only records the path


@pytest.fixture
def demo_dataset() -> Dataset:
    call_command("load_demo", stdout=StringIO())
    return Dataset.objects.get(name=demo.DATASET_NAME)


def test_a_source_of_the_demos_name_an_open_study_lists_is_not_changed(tmp_path, demo_dataset):
    items = list(demo_dataset.items.filter(split="test").order_by("external_id").values_list("external_id", flat=True))
    rationales_import(file=write_jsonl(tmp_path / "human.jsonl", [
        {"item_id": i, "source": SOURCE_NAME, "rationale": f"A person's rationale for {i}."} for i in items]),
        dataset_name=demo_dataset.name, user=None)
    source = RationaleSource.objects.get(name=SOURCE_NAME)
    assert source.kind != RationaleSource.Kind.LM
    study = study_create(name="uses-the-name", dataset=demo_dataset, sources=[source], consent_text="I agree.")
    study_open(study=study, user=OPERATOR)
    before = RationaleSource.objects.filter(pk=source.pk).values().get()

    with pytest.raises(GenerationError, match=r"kind of rationale source .* cannot change: study 'uses-the-name'"):
        demo_lm_register(model_path=MODEL)
    assert RationaleSource.objects.filter(pk=source.pk).values().get() == before
    assert not QuestionGenerator.objects.exists()


def test_the_demo_source_is_registered_and_registered_again(demo_dataset):
    source, generator = demo_lm_register(model_path=MODEL)
    assert (source.name, source.kind, source.model_name_or_path) == (SOURCE_NAME, RationaleSource.Kind.LM, str(MODEL))
    again, _ = demo_lm_register(model_path=Path("/models/other.gguf"), samples=1)
    assert again.pk == source.pk and again.model_name_or_path == "/models/other.gguf"


@pytest.mark.parametrize("samples", [0, -2])
def test_a_sample_count_below_one_is_refused_before_anything_is_registered(demo_dataset, samples):
    sources, generators = RationaleSource.objects.count(), QuestionGenerator.objects.count()
    with pytest.raises(GenerationError, match="at least 1"):
        demo_lm_register(model_path=MODEL, samples=samples)
    assert (RationaleSource.objects.count(), QuestionGenerator.objects.count()) == (sources, generators)


def test_the_command_refuses_items_below_one_before_anything_is_registered(demo_dataset, settings, tmp_path):
    settings.RL_DEMO_LM_GGUF = tmp_path / "model.gguf"
    settings.RL_DEMO_LM_GGUF.write_bytes(b"GGUF")  # never read: the command stops before loading it
    sources, generators = RationaleSource.objects.count(), QuestionGenerator.objects.count()
    for argv in (["--items", "-1"], ["--items", "0"], ["--samples", "-2", "--items", "1"]):
        with pytest.raises(CommandError, match="at least 1"):
            call_command("demo_lm", *argv, stdout=StringIO())
    assert (RationaleSource.objects.count(), QuestionGenerator.objects.count()) == (sources, generators)
