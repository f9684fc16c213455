"""The faithfulness job stores how it computed the label probabilities (``method``) and the prompt
the task model read (``prompt``) with them, from the one place that does it
(``studies.lm.label_scoring``), so scoring's ``computed_with`` and the report can name them."""
from __future__ import annotations

import pytest

from studies import demo
from studies.lm import label_scoring, templates
from studies.models import GenerationJob, Rationale, RationaleSource
from studies.services import generation
from studies.services.generation.faithfulness import PASSES, method_text
from studies.services.importers import rationales_import
from tests.studies.lm.test_faithfulness import demo_items, highlight_file

pytestmark = pytest.mark.django_db


def test_each_backend_has_a_method_and_a_prompt_and_the_method_names_the_reduced_inputs():
    assert set(label_scoring.LABEL_METHODS) == set(label_scoring.LABEL_PROMPTS) == set(label_scoring.TASK_BACKENDS)
    assert label_scoring.LABEL_PROMPTS["seq2seq"] == templates.T5_ANSWER
    assert label_scoring.LABEL_PROMPTS["causal"] == templates.CAUSAL_ANSWER
    assert label_scoring.LABEL_PROMPTS["classifier"] == "{question}"
    for backend in label_scoring.TASK_BACKENDS:
        text = method_text(backend)
        assert text.startswith(label_scoring.LABEL_METHODS[backend]) and text.endswith(PASSES)
        assert "softmax" in text
    assert "x \\ h (the question with the highlighted text deleted" in PASSES
    assert "summed token log-probability" in label_scoring.LABEL_METHODS["causal"]
    assert "matched to the choice labels" in label_scoring.LABEL_METHODS["classifier"]


@pytest.mark.lm
@pytest.mark.parametrize("backend, key", [("classifier", "classifier"), ("seq2seq", "t5_answerer"),
                                          ("causal", "gpt2")])
def test_the_job_stores_the_method_and_the_prompt_with_the_probabilities(tmp_path, lm_models, backend, key):
    pytest.importorskip("torch")
    items = demo_items()[:2]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind=GenerationJob.Kind.FAITHFULNESS, source=source, item_ids=[i.pk for i in items], enqueue=False,
        params={"task_model": str(lm_models[key]), "task_backend": backend}).pk)
    assert (job.status, job.done, job.failed) == ("done", 2, 0), job.error
    for rationale in Rationale.objects.filter(source=source).select_related("item__dataset"):
        f = rationale.faithfulness
        assert f["method"] == method_text(backend)
        assert f["prompt"] == label_scoring.LABEL_PROMPTS[backend]
        if backend != "classifier":  # the stored template is the one the scorer fills
            item = generation.prompt_item(rationale.item)
            filled = (templates.t5_answer_input if backend == "seq2seq" else templates.causal_answer_input)(item)
            assert filled.startswith(f["prompt"].split("{", 1)[0])
