"""Faithfulness produced, not only scored: highlights and probabilities come in through the
rationale importer or the faithfulness job (a task model run three times per item), land where
scoring reads them, and a highlight study is scored end to end with them."""
from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from annotations.platforms import handoff
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring.services import study_score
from studies import demo
from studies.lm import highlights
from studies.models import Dataset, GenerationFailure, GenerationJob, Rationale, RationaleSource, Study
from studies.services import generation
from studies.services.importers import ImportValidationError, rationales_import
from studies.services.studies import study_create
from tests.annotations.test_demo_study_fills import do_one_task

pytestmark = pytest.mark.django_db


def demo_items():
    call_command("load_demo", stdout=StringIO())
    return list(Dataset.objects.get(name=demo.DATASET_NAME).items.order_by("external_id"))


def highlight_file(tmp_path, items, *, probabilities=None, name="highlighter"):
    """One rationale per item whose highlight is the question's first three words."""
    lines = []
    for index, item in enumerate(items):
        row = {"item_id": item.external_id, "source": name, "rationale": f"Look at: {item.question[:20]}",
               "highlight_tokens": [[0, 3]]}
        if probabilities is not None and probabilities[index] is not None:
            row.update(probabilities[index])
        lines.append(json.dumps(row))
    path = tmp_path / "highlights.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_highlight_spans_make_the_two_reduced_inputs():
    text = "Can a hummingbird fly backwards?"
    chars = highlights.token_spans_to_chars([[2, 4]], text)
    assert chars == [[6, 21]] and text[6:21] == "hummingbird fly"
    assert highlights.highlight_only(text, chars) == "hummingbird fly"
    assert highlights.without_highlight(text, chars) == "Can a backwards?"
    with pytest.raises(ValueError, match="outside"):
        highlights.check_spans([[0, 99]], text)


def test_importer_stores_highlights_and_probabilities_where_scoring_reads_them(tmp_path):
    items = demo_items()[:3]
    probs = [{"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "y_hat": "yes"}] * 3
    record = rationales_import(file=highlight_file(tmp_path, items, probabilities=probs), dataset_name=demo.DATASET_NAME)
    assert record.summary["rows_with_faithfulness_probabilities"] == 3
    assert record.summary["sources_with_highlights"] == ["highlighter"]
    source = RationaleSource.objects.get(name="highlighter")
    assert source.has_highlights
    r = Rationale.objects.get(source=source, item=items[0])
    assert r.highlights == [[0, len(" ".join(items[0].question.split()[:3]))]]
    # the spans they were computed on, and the rule the file did not name, marked assumed
    assert r.faithfulness == {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "y_hat": "yes",
                              "imported_from": "highlights.jsonl", "highlights": r.highlights,
                              "y_hat_from": "highlight", "y_hat_from_assumed": True}
    assert "extra" not in r.generation_info  # the columns were read, not parked


def test_a_file_where_some_rows_miss_probabilities_is_refused_with_the_rows_listed(tmp_path):
    items = demo_items()[:4]
    probs = [{"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3}, None,
             {"p_full": 0.9, "p_highlight": 1.7, "p_without": 0.3}, {"p_full": 0.9, "p_highlight": 0.8}]
    with pytest.raises(ImportValidationError) as error:
        rationales_import(file=highlight_file(tmp_path, items, probabilities=probs), dataset_name=demo.DATASET_NAME)
    text = "\n".join(error.value.lines())
    assert "line 2" in text and "p_full is missing" in text and "p_without is missing" in text
    assert "line 3" in text and "not a probability" in text
    assert "line 4" in text and "line 1" not in text
    assert not RationaleSource.objects.filter(name="highlighter").exists()  # all or nothing


def test_the_admin_action_queues_the_faithfulness_job_on_a_highlight_source(tmp_path, admin_client):
    items = demo_items()[:3]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    url = reverse("admin:studies_rationalesource_changelist")
    page = admin_client.post(url, {"action": "generate_faithfulness", "_selected_action": [source.pk]})
    assert page.status_code == 200 and b"Queue the task model" in page.content and b"scoring the label words" in page.content
    form = {"action": "generate_faithfulness", "_selected_action": [source.pk], "apply": "1",
            "dataset": items[0].dataset.pk, "split": "", "batch_size": 8, "task_model": " /models/task ",
            "task_backend": "seq2seq"}
    assert admin_client.post(url, form).status_code == 302
    job = GenerationJob.objects.get(kind="faithfulness")
    assert (job.source, job.total, job.batch_size, job.status) == (source, 3, 8, "queued")
    assert (job.params["task_model"], job.params["task_backend"]) == ("/models/task", "seq2seq")
    # A source without highlights is refused by the service, and the page says why.
    plain = RationaleSource.objects.create(name="plain", kind="lm", backend="causal", model_name_or_path="/m")
    response = admin_client.post(url, {**form, "_selected_action": [plain.pk]}, follow=True)
    assert b"has no highlights" in response.content
    assert GenerationJob.objects.filter(kind="faithfulness").count() == 1


@pytest.mark.lm
@pytest.mark.parametrize("backend, key", [("classifier", "classifier"), ("seq2seq", "t5_answerer"),
                                          ("causal", "gpt2")])
def test_faithfulness_job_runs_the_task_model_three_times_per_item(tmp_path, lm_models, backend, key):
    pytest.importorskip("torch")
    items = demo_items()[:3]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, dataset=source.rationales.first().item.dataset, enqueue=False,
        params={"task_model": str(lm_models[key]), "task_backend": backend}).pk)
    assert (job.status, job.done, job.total, job.failed) == ("done", 3, 3, 0)

    from studies.lm.label_scoring import LabelScorer
    from studies.services.generation import prompt_item

    scorer = LabelScorer(backend, str(lm_models[key]))
    for r in Rationale.objects.filter(source=source).select_related("item__dataset"):
        f = r.faithfulness
        assert f["job_id"] == job.pk and f["task_backend"] == backend and f["task_model"] == str(lm_models[key])
        # the weights' device and dtype and the library versions, as a rationale job records them
        assert f["device"] == "cpu" and f["dtype"] == "float32" and f["torch"] and f["transformers"]
        base = prompt_item(r.item)
        passes = [scorer.probabilities([base.__class__(question=text, choices=base.choices, dataset=base.dataset)])[0]
                  for text in (r.item.question, highlights.highlight_only(r.item.question, r.highlights),
                               highlights.without_highlight(r.item.question, r.highlights))]
        # An external task model (not the one that made the highlight) reads the full input: y_hat
        # comes from the full input, as in ERASER, and the rule is stored with the numbers.
        assert f["y_hat_from"] == "full" and f["y_hat"] == max(passes[0], key=passes[0].get)
        assert [f["p_full"], f["p_highlight"], f["p_without"]] == pytest.approx([p[f["y_hat"]] for p in passes])
        assert all(sum(p.values()) == pytest.approx(1.0) for p in passes)
    again = generation.generation_job_run(job_id=job.pk)
    assert again.done == 3  # a re-run changes nothing


@pytest.mark.lm
def test_the_model_that_made_the_highlight_is_scored_with_y_hat_from_the_highlight(tmp_path, lm_models):
    """The seed (pyhighlights) scores the select-then-predict model that made the highlight, y_hat
    from the highlight pass. When the highlight source is a model the project can run, a job
    without a task model scores that model that way; an explicit y_hat_from overrides the rule."""
    pytest.importorskip("torch")
    items = demo_items()[:3]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    dataset = source.rationales.first().item.dataset
    with pytest.raises(generation.GenerationError, match="task_model is required: 'highlighter' has no model"):
        generation.generation_job_create(kind="faithfulness", source=source, dataset=dataset, enqueue=False, params={})
    RationaleSource.objects.filter(pk=source.pk).update(kind="lm", backend="seq2seq",
                                                       model_name_or_path=str(lm_models["t5_answerer"]))
    source.refresh_from_db()
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, dataset=dataset, enqueue=False, params={}).pk)
    assert job.status == "done" and job.done == 3, job.error
    assert (job.params["task_model"], job.params["task_backend"], job.params["y_hat_from"]) == (
        str(lm_models["t5_answerer"]), "seq2seq", "highlight")

    from studies.lm.label_scoring import LabelScorer
    from studies.services.generation import prompt_item

    scorer = LabelScorer("seq2seq", str(lm_models["t5_answerer"]))
    for r in Rationale.objects.filter(source=source).select_related("item__dataset"):
        base = prompt_item(r.item)
        h = highlights.highlight_only(r.item.question, r.highlights)
        from_highlight = scorer.probabilities([base.__class__(question=h, choices=base.choices,
                                                              dataset=base.dataset)])[0]
        assert r.faithfulness["y_hat_from"] == "highlight"
        assert r.faithfulness["y_hat"] == max(from_highlight, key=from_highlight.get)
    forced = generation.generation_job_create(kind="faithfulness", source=source, dataset=dataset, enqueue=False,
                                              params={"y_hat_from": "full"})
    assert forced.params["y_hat_from"] == "full"
    with pytest.raises(generation.GenerationError, match="y_hat_from must be one of highlight, full"):
        generation.generation_job_create(kind="faithfulness", source=source, dataset=dataset, enqueue=False,
                                         params={"y_hat_from": "both"})


@pytest.mark.lm
def test_a_highlight_that_does_not_fit_its_question_is_a_failure(tmp_path, lm_models):
    pytest.importorskip("torch")
    items = demo_items()[:2]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    Rationale.objects.filter(source=source, item=items[0]).update(highlights=[[0, 999]])
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, item_ids=[i.pk for i in items], enqueue=False,
        params={"task_model": str(lm_models["classifier"]), "task_backend": "classifier"}).pk)
    assert job.done == 2 and job.failed == 1
    assert "outside the question" in GenerationFailure.objects.get(job=job).reason


def test_a_rationale_deleted_after_the_job_was_made_fails_its_item_saying_why_and_the_job_ends(tmp_path, lm_models):
    """Before, the item was handed out by every batch, each queueing the next, for ever: nothing
    was scored for it and no kind counted it as processed."""
    pytest.importorskip("torch")
    from studies.services.generation.common import RATIONALE_GONE

    items = demo_items()[:2]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    made = generation.generation_job_create(
        kind="faithfulness", source=source, item_ids=[i.pk for i in items], enqueue=False,
        params={"task_model": str(lm_models["classifier"]), "task_backend": "classifier"})
    Rationale.objects.filter(source=source, item=items[0]).delete()
    job = generation.generation_job_run(job_id=made.pk)
    assert (job.status, job.done, job.failed) == (GenerationJob.Status.DONE, 2, 1)
    assert GenerationFailure.objects.get(job=job).reason == RATIONALE_GONE.format(what="score")


@pytest.mark.lm
def test_highlight_study_end_to_end_with_probabilities_the_project_computed(tmp_path, lm_models):
    pytest.importorskip("torch")
    items = demo_items()
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    study = study_create(
        name="Highlight study", dataset=items[0].dataset, sources=[source], annotators_per_unit=1, units_per_task=5,
        reward=Decimal("1.00"), consent_text="Consent.", instructions="Answer.", faithfulness_enabled=True)
    study = study_open(study=study, user=OPERATOR)
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, dataset=study.dataset, split="test", enqueue=False,
        params={"task_model": str(lm_models["classifier"]), "task_backend": "classifier"}).pk)
    assert job.status == "done" and job.done == len(items)
    entry = f"/w/s/{handoff.study_token(study.pk)}/"
    client = Client()
    while do_one_task(client, entry):
        client = Client()

    run = study_score(study=study, similarity=False)

    assert run.status == "done", run.error
    stored = [r.faithfulness for r in Rationale.objects.filter(source=source)]
    expected_suff = sum(f["p_full"] - f["p_highlight"] for f in stored) / len(stored)
    expected_comp = sum(f["p_full"] - f["p_without"] for f in stored) / len(stored)
    assert run.results["test_sufficiency"] == pytest.approx(expected_suff)
    assert run.results["test_comprehensiveness"] == pytest.approx(expected_comp)
    assert run.results["faithfulness"]["y_hat_from"] == ["full"]  # an external classifier: ERASER's rule
    per_source = run.results["faithfulness"]["per_source"]["highlighter"]
    assert per_source["n"] == len(items) and per_source["computed_by"] == [str(lm_models["classifier"])]
    assert Study.objects.get(pk=study.pk).faithfulness_enabled
