"""What LM jobs prompt with, record and train on.

1. A rationale job on the train split draws its demonstrations from the train items outside its
   own: no prompt shows an item its own gold answer and rationale; too few left refuse the job with
   how many it needs and found.
2. A rationale (or generalization question) records its seeds named for what they do: the
   decoding's ``sampling_seed`` (the one the backend sampled with) and the ``demonstration_seed``
   that drew the demonstrations (``seed`` keeps what it always recorded); the score report prints
   the sampling seed as such.
3. A fine-tuning job's numbers are checked and cast (a bad one is a GenerationError naming it, a
   400 through the API, never a 500), and the cast values are what it records and trains with.
4. A researcher's fine-tuning job trains only on the split's items they may read, and says how
   many it left out."""
from __future__ import annotations

import io
import json
import math

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

import studies.services.generation.questions as questions_module
import studies.services.generation.rationales as rationales_module
from scoring.reports.sections import sources_notes
from scoring.services.score import GENERATION_KEYS
from studies.api.tokens import api_token_create
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenerationJob,
    Item,
    QuestionGenerator,
    Rationale,
    RationaleSource,
)
from studies.selectors import items_for_user
from studies.services.generation import GenerationError, generation_job_create, generation_job_run_batch
from studies.services.importers import items_import_strategyqa
from studies.services.studies import study_create
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.studies.lm.test_finetune_recorded_items import trained_on  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

DATASET = "strategyqa"


@pytest.fixture(scope="module")
def train_rows(strategyqa_dir) -> list[dict]:
    return json.loads((strategyqa_dir / "strategyqa_processed_train.json").read_text())


def import_split(rows: list[dict], split: str) -> list[Item]:
    """``rows`` imported through the StrategyQA importer into ``split``, in id order."""
    items_import_strategyqa(file=io.BytesIO(json.dumps(rows).encode()), filename=f"strategyqa_processed_{split}.json",
                            dataset_name=DATASET, split=split)
    return list(Item.objects.filter(dataset__name=DATASET, split=split).order_by("pk"))


class Recorder:
    """A causal backend that records each prompt and the decoding seed it was asked to sample with,
    and answers every prompt in the causal rationale format (or ``reply``)."""

    kind = "causal"
    device = "cpu"

    def __init__(self, reply: str = " yes\nReason: because it is so.\n###"):
        self.prompts: list[str] = []
        self.seeds: list[int] = []
        self.reply = reply

    def generate(self, prompts, decoding):
        self.prompts.extend(prompts)
        self.seeds.append(decoding.seed)
        return [[self.reply] * decoding.num_return_sequences for _ in prompts]


def run_to_end(job: GenerationJob) -> GenerationJob:
    while generation_job_run_batch(job_id=job.pk):
        pass
    job.refresh_from_db()
    return job


def causal_source(name: str, **fields) -> RationaleSource:
    return RationaleSource.objects.create(name=name, kind="lm", backend="causal", model_name_or_path="tiny", **fields)


# --- 1. a train-split job never shows an item its own gold rationale ---------------------------------------
def test_a_train_split_rationale_job_never_shows_an_item_its_own_gold_answer_and_rationale(train_rows, monkeypatch):
    items = import_split(train_rows[:14], "train")
    source = causal_source("no-demos", seed=1)  # no demonstrations of its own: six are drawn from train
    backend = Recorder()
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: backend)

    job = generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="train", limit=8,
                                enqueue=False)
    own = {item.external_id for item in items[:8]}
    drawn = {d["key"] for d in job.params["demonstrations"]}
    assert len(drawn) == 6 and not drawn & own  # the six train items outside the job's eight
    run_to_end(job)

    assert len(backend.prompts) == 8
    for item, prompt in zip(items[:8], backend.prompts, strict=True):
        assert item.question in prompt  # the query
        assert item.gold_rationale not in prompt, item.external_id


def test_a_job_on_the_whole_train_split_draws_from_it_and_names_its_items_among_the_six(train_rows, monkeypatch):
    """Too few train items outside the job (a job on the whole train split, as Gen-U's training
    rationales need): the six come from all of them, and the job and each affected rationale say so."""
    items = import_split(train_rows[:10], "train")
    source = causal_source("no-demos-whole", seed=1)
    backend = Recorder()
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: backend)
    job = generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="train",
                                enqueue=False)
    drawn = {d["key"] for d in job.params["demonstrations"]}
    assert len(drawn) == 6
    where = job.params["demonstrations_from"]
    assert "6 of them are items of this job itself" in where and "own_item_in_demonstrations" in where
    run_to_end(job)
    flagged = {r.item.external_id for r in Rationale.objects.filter(source=source)
               if r.generation_info.get("own_item_in_demonstrations")}
    assert flagged == drawn


# --- 2. the seeds, named for what they do ------------------------------------------------------------------
def test_a_rationale_records_the_sampling_seed_it_was_sampled_with_and_the_demonstration_seed(train_rows,
                                                                                            monkeypatch):
    items = import_split(train_rows[:12], "train")
    import_split(train_rows[12:14], "test")
    source = causal_source("sampler", seed=42, decoding={"do_sample": True, "temperature": 0.7, "seed": 7})
    backend = Recorder()
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: backend)

    run_to_end(generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="test",
                                     enqueue=False))
    infos = list(Rationale.objects.filter(source=source).values_list("generation_info", flat=True))
    assert len(infos) == 2 and backend.seeds == [7]
    for info in infos:
        assert info["sampling_seed"] == 7 == info["decoding"]["seed"]  # what sampled
        assert info["demonstration_seed"] == 42  # what drew the six demonstrations
        assert info["seed"] == 42  # the key as it always was, for what reads it

    # The score report names the sampling seed as such (the combination the score run reads).
    combo = {**{key: infos[0][key] for key in GENERATION_KEYS}, "n_rationales": 2}
    note = sources_notes({"sources": {"sampler": {"kind": "lm", "backend": "causal", "generation": [combo]}}})[0]
    assert "sampling seed 7" in note and "source seed 42 (it draws only demonstrations)" in note
    assert ", seed 42" not in note


def test_a_source_with_its_own_demonstrations_records_no_demonstration_seed(train_rows, monkeypatch):
    items = import_split(train_rows[:2], "test")
    own = [{"question": f"q{i}?", "choices": ["yes", "no"], "answer": "yes", "rationale": f"r{i}", "key": f"k{i}"}
           for i in range(6)]
    source = causal_source("own-demos", seed=42, demonstrations=own)
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: Recorder())
    run_to_end(generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="test",
                                     enqueue=False))
    info = Rationale.objects.filter(source=source).first().generation_info
    assert (info["sampling_seed"], info["demonstration_seed"], info["seed"]) == (0, None, 42)


def test_a_generalization_question_records_the_sampling_seed_it_was_sampled_with(train_rows, monkeypatch):
    items = import_split(train_rows[:1], "test")
    demos = {t: [{"question": f"Is {i} odd?", "output": f"Is {i} even?", "answer": "True", "context": ""}
                 for i in range(6)] for t in ("rephrase", "similar", "counterfactual")}
    generator = QuestionGenerator.objects.create(name="asker", backend="causal", model_name_or_path="tiny", seed=11,
                                                 decoding={"do_sample": True, "seed": 5}, demonstrations=demos)
    backend = Recorder(reply="Would a penguin enjoy living in the Sahara desert?\nanswer: False")
    monkeypatch.setattr(questions_module, "source_backend", lambda *a, **k: backend)

    run_to_end(generation_job_create(kind="generalization_questions", generator=generator,
                                     dataset=items[0].dataset, split="test", enqueue=False))
    metadata = list(GeneralizationQuestion.objects.filter(item=items[0]).values_list("metadata", flat=True))
    assert metadata and backend.seeds == [5]
    for m in metadata:
        assert m["sampling_seed"] == 5 == m["decoding"]["seed"] and m["seed"] == 11
        assert m["demonstration_seed"] is None  # the generator's own demonstrations: none drawn


# --- 3. fine-tuning parameters are checked and cast ----------------------------------------------------------
def finetune_job(dataset: Dataset, user=None, **params) -> GenerationJob:
    return generation_job_create(kind="finetune", dataset=dataset, split="train", user=user, enqueue=False,
                                 params={"base_model": "local-t5", "mode": "answer_i", "preset": "quick", **params})


@pytest.mark.parametrize(("given", "why"), [
    ({"epochs": "abc"}, "epochs must be a number, not 'abc'"),
    ({"epochs": 2.7}, "epochs must be a whole number, not 2.7"),
    ({"epochs": 0}, "epochs must be between 1 and 2147483647"),
    ({"epochs": 10**40}, "epochs must be between 1 and 2147483647"),
    ({"batch_size": True}, "batch_size must be a number, not True"),
    ({"n_shot": "five"}, "n_shot must be a number, not 'five'"),
    ({"lr": "x"}, "lr must be a number, not 'x'"),
    ({"lr": 0}, "lr must be positive, not 0"),
    ({"lr": "nan"}, "lr must be a finite number, not 'nan'"),
    ({"seed": [1]}, "seed must be a number, not [1]"),
    ({"seed": -1}, "seed must be between 0 and"),
    ({"steps": "many"}, "steps must be a number, not 'many'"),
    ({"include_generalization": "false"}, "include_generalization must be true or false, not 'false'"),
    ({"mode": ["answer_i"]}, "mode must be text, not ['answer_i']"),
])
def test_a_bad_fine_tuning_number_is_refused_naming_the_parameter_and_why(train_rows, given, why):
    items = import_split(train_rows[:6], "train")
    with pytest.raises(GenerationError) as refused:
        finetune_job(items[0].dataset, **given)
    assert why in str(refused.value)


def test_fine_tuning_numbers_are_stored_cast_and_the_steps_come_from_them(train_rows):
    items = import_split(train_rows[:6], "train")
    job = finetune_job(items[0].dataset, epochs="3", n_shot="5", batch_size=2.0, lr="3e-4", seed="4")
    p = job.params
    assert (p["epochs"], p["n_shot"], p["batch_size"], p["lr"], p["seed"]) == (3, 5, 2, 3e-4, 4)
    assert all(type(p[k]) is int for k in ("epochs", "n_shot", "batch_size", "seed")) and type(p["lr"]) is float
    assert p["examples"] == 5 and p["steps"] == math.ceil(5 * 3 / 2) == job.total
    # The quick preset's epochs and lr, given as text, are its values: not overrides.
    assert p["overrides"] == ["batch_size", "n_shot", "seed"]


def test_the_api_answers_a_bad_fine_tuning_number_with_a_400_naming_it(train_rows):
    import_split(train_rows[:3], "train")
    admin = get_user_model().objects.create_superuser(username="root", password="pw-root", email="r@example.org")
    _, key = api_token_create(user=admin, name="test", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    client.raise_request_exception = False
    for bad, why in (({"epochs": "abc"}, "epochs must be a number"), ({"seed": [1]}, "seed must be a number")):
        response = client.post("/api/v1/generation-jobs/", {
            "kind": "finetune", "dataset": DATASET, "split": "train",
            "params": {"base_model": "t5-small", **bad}}, format="json")
        assert response.status_code == 400, (bad, response.status_code, response.content[:300])
        assert why in response.content.decode()
    assert not GenerationJob.objects.exists()


# --- 4. a researcher's fine-tuning job trains only on items they may read ------------------------------------
@pytest.fixture
def bob_reads_four(train_rows):
    """Ten train items: Alice's study shows all, Bob's a seeded sample of four."""
    items = import_split(train_rows[:10], "train")
    alice, _ = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    source = RationaleSource.objects.create(name="imported", kind="imported")
    dataset = items[0].dataset
    study_create(name="alice-train", dataset=dataset, split="train", sources=[source], owner=alice, user=None,
                 consent_text="ok")
    study_create(name="bob-train", dataset=dataset, split="train", sources=[source], item_sample_size=4,
                 sample_seed=1, owner=bob, user=None, consent_text="ok")
    readable = items_for_user(user=bob).filter(split="train")
    assert readable.count() == 4
    return {"dataset": dataset, "bob": bob, "source": source, "readable": readable}


def test_a_researchers_fine_tuning_job_trains_only_on_items_they_may_read_and_counts_the_rest(bob_reads_four):
    lab = bob_reads_four
    job = finetune_job(lab["dataset"], user=lab["bob"])
    data = job.params["data"]
    assert (data["items"], data["items_left_out"]) == (4, 6)
    assert job.params["examples"] == 4 and job.params["steps"] == math.ceil(4 * 3 / 8) == job.total
    # More shots than they may read: refused with the count left out.
    with pytest.raises(GenerationError, match=r"n_shot 5 is more than the 4 items .* \(6 of the split's 10 left out\)"):
        finetune_job(lab["dataset"], user=lab["bob"], n_shot=5)
    # The operator's job reads every item.
    operator = finetune_job(lab["dataset"])
    assert operator.params["data"]["items"] == 10 and "items_left_out" not in operator.params["data"]


def test_a_fine_tuning_job_trains_on_the_items_it_recorded_when_more_become_readable(bob_reads_four, trained_on):  # noqa: F811
    """Bob's second study shows him every train item after the job was made: the job still trains
    on the four it recorded (``params["train_item_ids"]``), the data its record shows."""
    lab = bob_reads_four
    job = finetune_job(lab["dataset"], user=lab["bob"])
    recorded = job.params["train_item_ids"]
    assert len(recorded) == 4
    study_create(name="bob-all", dataset=lab["dataset"], split="train", sources=[lab["source"]], owner=lab["bob"],
                 user=None, consent_text="ok")

    generation_job_run_batch(job_id=job.pk)

    job.refresh_from_db()
    assert job.status != GenerationJob.Status.FAILED, job.error
    assert len(trained_on) == 4
    questions = dict(Item.objects.filter(pk__in=recorded).values_list("pk", "question"))
    assert all(any(questions[pk] in source for pk in recorded) for source, _target in trained_on)
