"""An LM job acts for the researcher who started it (``job_actor``): what it stores for rationales
that another researcher's study uses is not theirs to change. A faithfulness job writes
``Rationale.faithfulness``, which that study's scores read, and a Gen-U job adds the predictions
its Gen-U is computed from: refused rows keep what they had and are recorded as failures, while
the study's own researcher (its study open or not) and the operator still write."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.services.opening import study_open
from studies import demo
from studies.models import (
    GeneralizationQuestion,
    GenerationFailure,
    GenUPrediction,
    Rationale,
    RationaleSource,
)
from studies.services import generation
from studies.services.importers import rationales_import
from studies.services.questions import generalization_questions_set_validation
from studies.services.studies import study_create
from tests.api.conftest import grant

from .openai_server import OpenAIServer, completion
from .test_faithfulness import demo_items, highlight_file
from .test_job_rights import RESEARCHER, staff

pytestmark = pytest.mark.django_db

IMPORTED = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "y_hat": "yes"}
NOT_YOURS = "not stored: a study you may not change uses this rationale"


class StubScorer:
    """The task model, without a model: each label's probability from its place among the choices
    (the first label most likely). The rights are the store's, whatever the model says."""

    def __init__(self, backend, model_name_or_path):
        self.backend, self.model_name = backend, model_name_or_path

    def probabilities(self, items):
        out = []
        for item in items:
            labels = [label for label, _ in item.choices]
            weights = [len(labels) - index for index in range(len(labels))]
            out.append({label: w / sum(weights) for label, w in zip(labels, weights, strict=True)})
        return out


@pytest.fixture
def world(tmp_path, monkeypatch):
    """The demo items with a highlight source's rationales (imported with faithfulness
    probabilities), and Bob's draft study of that source over two of them."""
    monkeypatch.setattr("studies.services.generation.faithfulness.LabelScorer", StubScorer)
    items = [i for i in demo_items() if i.split == "test"]
    rationales_import(file=highlight_file(tmp_path, items, probabilities=[IMPORTED] * len(items)),
                      dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    alice = grant(staff("alice", *RESEARCHER), "studies.change_study")  # may change studies, not Bob's
    bob = grant(staff("bob", *RESEARCHER), "studies.change_study")
    study = study_create(
        name="bobs-highlights", dataset=items[0].dataset, split="test", sources=[source],
        item_sample_size=2, owner=bob, annotators_per_unit=1, units_per_task=2, reward=Decimal("1.00"),
        consent_text="Consent.", instructions="Answer.", faithfulness_enabled=True)
    bobs_items = set(study.items.values_list("pk", flat=True))
    assert len(bobs_items) == 2 and bobs_items < {i.pk for i in items}
    return items, source, study, bobs_items, alice, bob


def faithfulness_job(source, items, user):
    return generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, item_ids=[i.pk for i in items], user=user, enqueue=False,
        params={"task_model": "/models/task", "task_backend": "classifier"}).pk)


def faithfulness_by_item(source) -> dict[int, dict]:
    return dict(Rationale.objects.filter(source=source).values_list("item_id", "faithfulness"))


def test_a_faithfulness_job_changes_no_rationale_another_researchers_study_uses(world):
    items, source, _, bobs_items, alice, _ = world
    n = len(items)
    alices = faithfulness_job(source, items, alice)

    stored = faithfulness_by_item(source)
    for item in items:
        if item.pk in bobs_items:  # what Bob's next score run reads is still what was imported
            highlights = Rationale.objects.get(source=source, item_id=item.pk).highlights
            assert stored[item.pk] == {**IMPORTED, "imported_from": "highlights.jsonl", "highlights": highlights,
                                       "y_hat_from": "highlight", "y_hat_from_assumed": True}
        else:
            assert stored[item.pk]["job_id"] == alices.pk
    assert (alices.status, alices.done, alices.total, alices.failed) == ("done", n, n, 2), alices.error
    failures = GenerationFailure.objects.filter(job=alices)
    assert set(failures.values_list("item_id", flat=True)) == bobs_items
    assert all(f.reason.startswith(NOT_YOURS) and '"job_id"' in f.raw_output for f in failures)
    assert "bobs-highlights" not in " ".join(f.reason for f in failures)  # another researcher's study, unnamed

    again = generation.generation_job_run(job_id=alices.pk)  # a re-run: the refused items stay processed
    assert (again.done, again.failed) == (n, 2) and faithfulness_by_item(source) == stored


def test_the_studys_researcher_and_the_operator_still_compute_faithfulness(world):
    # Faithfulness is not fixed when a study opens: its owner may recompute it for the open study.
    items, source, study, _, _, bob = world
    study_open(study=study, user=bob)
    n = len(items)
    bobs = faithfulness_job(source, items, bob)
    assert (bobs.status, bobs.done, bobs.failed) == ("done", n, 0), bobs.error
    assert {f["job_id"] for f in faithfulness_by_item(source).values()} == {bobs.pk}

    operators = faithfulness_job(source, items, None)
    assert operators.by_operator and (operators.done, operators.failed) == (n, 0)
    assert {f["job_id"] for f in faithfulness_by_item(source).values()} == {operators.pk}


def test_a_genu_job_adds_no_prediction_to_another_researchers_studys_gen_u(world):
    # Gen-U predictions are per (question, source): the ones of an item that Bob's study drew, for
    # the source it lists, are what his study's Gen-U is computed from.
    items, source, _, bobs_items, alice, bob = world
    n = len(items)
    questions = [GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Rephrased: {item.question}",
                                                       answer=item.gold_answer) for item in items]
    generalization_questions_set_validation(questions=questions, status="valid")
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        answerer = RationaleSource.objects.create(
            name="answerer", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"backoff_s": 0.01, "concurrency": 1})

        def genu_job(user):
            return generation.generation_job_run(job_id=generation.generation_job_create(
                kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=user, enqueue=False,
                params={"answerer_i": answerer.pk, "answerer_ir": answerer.pk}).pk)

        predictions = GenUPrediction.objects.filter(rationale_source=source)
        alices = genu_job(alice)
        covered = set(predictions.values_list("generalization_question__item_id", flat=True))
        assert covered == {i.pk for i in items} - bobs_items and predictions.count() == 2 * (n - 2)
        assert (alices.status, alices.done, alices.failed) == ("done", n, 2), alices.error
        failures = GenerationFailure.objects.filter(job=alices)
        assert set(failures.values_list("item_id", flat=True)) == bobs_items
        assert all(f.reason.startswith(NOT_YOURS) for f in failures)
        again = generation.generation_job_run(job_id=alices.pk)
        assert (again.done, again.failed) == (n, 2) and predictions.count() == 2 * (n - 2)

        bobs = genu_job(bob)
        assert (bobs.status, bobs.done, bobs.failed) == ("done", n, 0), bobs.error
        assert predictions.count() == 2 * n
