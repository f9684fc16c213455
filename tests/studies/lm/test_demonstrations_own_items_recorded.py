"""What a prompt's demonstrations show, and what a rationale records of them and of its weights.

1. A generalization question job on the train split draws its demonstrations from the train items
   outside its own: no prompt shows an item its own existing question; a job on the whole train
   split names its items among them, and their questions record ``own_item_in_demonstrations``;
   ``demonstrations_from`` says when unvalidated questions were drawn.
2. A rationale source's own demonstrations are compared with the job's items as drawn ones are:
   the job names those they show, and those items' rationales record it.
3. A rationale records a fingerprint of its demonstrations' full content: edited texts under the
   same keys are two rows of the score run's ``sources``.
4. A rationale records the checkpoint its weights are: weights a later fine-tuning job published
   under the same source name are another row of ``sources``."""
from __future__ import annotations

import json

import pytest

import studies.services.generation.questions as questions_module
import studies.services.generation.rationales as rationales_module
from scoring.reports.sections import sources_notes
from scoring.services.score import _sources
from studies.lm import templates
from studies.models import GeneralizationQuestion, GenerationJob, QuestionGenerator, Rationale
from studies.services.generation import generation_job_create
from studies.services.generation.common import prompt_item
from tests.factories import RationaleSourceFactory, StudyFactory
from tests.studies.test_job_demos_seeds_finetune_params import (
    Recorder,
    causal_source,
    import_split,
    run_to_end,
)

from .test_checkpoint_replaced import _xavier_replaces, lab  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

QUESTION_REPLY = "Would a penguin enjoy living in the Sahara desert?\nanswer: False"


@pytest.fixture(scope="module")
def train_rows(strategyqa_dir) -> list[dict]:
    return json.loads((strategyqa_dir / "strategyqa_processed_train.json").read_text())


def with_train_questions(items) -> dict[int, dict[str, str]]:
    """One existing (unvalidated) question of each type per item, by item and type."""
    texts = {}
    for item in items:
        for qtype in templates.QUESTION_TYPES:
            text = f"Existing {qtype} question of item {item.external_id}?"
            GeneralizationQuestion.objects.create(item=item, qtype=qtype, text=text, answer="yes", origin="import")
            texts.setdefault(item.pk, {})[qtype] = text
    return texts


def question_job(items, monkeypatch, **kwargs) -> tuple[GenerationJob, Recorder]:
    generator = QuestionGenerator.objects.create(name="asker", backend="causal", model_name_or_path="tiny", seed=3)
    backend = Recorder(reply=QUESTION_REPLY)
    monkeypatch.setattr(questions_module, "source_backend", lambda *a, **k: backend)
    job = generation_job_create(kind="generalization_questions", generator=generator, dataset=items[0].dataset,
                                split="train", enqueue=False, **kwargs)
    return job, backend


# --- 1. question demonstrations and the job's own items ------------------------------------------------
def test_a_train_split_question_job_never_shows_an_item_its_own_question(train_rows, monkeypatch):
    items = import_split(train_rows[:14], "train")
    texts = with_train_questions(items)
    job, backend = question_job(items, monkeypatch, limit=4)
    run_to_end(job)

    assert len(backend.prompts) == 4 * 3
    prompts = iter(backend.prompts)
    for item in items[:4]:
        for qtype in templates.QUESTION_TYPES:
            prompt = next(prompts)
            assert texts[item.pk][qtype] not in prompt, (item.external_id, qtype)
    for qtype in templates.QUESTION_TYPES:
        assert "6 of the six are unvalidated questions" in job.params["demonstrations_from"][qtype]
        assert "items of this job itself" not in job.params["demonstrations_from"][qtype]
    assert not any(m.get("own_item_in_demonstrations") for m in GeneralizationQuestion.objects.filter(
        origin="generator:asker").values_list("metadata", flat=True))


def test_a_question_job_on_the_whole_train_split_names_its_items_among_the_demonstrations(train_rows,
                                                                                         monkeypatch):
    items = import_split(train_rows[:7], "train")
    with_train_questions(items)
    job, _backend = question_job(items, monkeypatch)
    where = job.params["demonstrations_from"]["rephrase"]
    assert "6 of them show items of this job itself" in where and "own_item_in_demonstrations" in where
    run_to_end(job)
    shown = {d["question"] for d in job.params["demonstrations"]["rephrase"]}
    flagged = {q.item.question for q in GeneralizationQuestion.objects.filter(origin="generator:asker",
                                                                              qtype="rephrase")
               if q.metadata.get("own_item_in_demonstrations")}
    assert flagged and flagged <= shown


# --- 2. a source's own demonstrations and the job's own items ----------------------------------------
def test_a_sources_own_demonstrations_showing_the_jobs_items_are_named_and_recorded(train_rows, monkeypatch):
    items = import_split(train_rows[:10], "train")
    own = [templates.demonstration_from(prompt_item(i)).as_json() for i in items[:6]]
    source = causal_source("copied-demos", seed=1, demonstrations=own)
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: Recorder())
    job = generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="train",
                                enqueue=False)
    where = job.params["demonstrations_from"]
    assert where.startswith(rationales_module.SOURCE_DEMONSTRATIONS)
    assert "6 of them show items of this job itself" in where and items[0].external_id in where
    run_to_end(job)
    flagged = {r.item_id for r in Rationale.objects.filter(source=source)
               if r.generation_info.get("own_item_in_demonstrations")}
    assert flagged == {i.pk for i in items[:6]}
    info = Rationale.objects.get(source=source, item=items[0]).generation_info
    assert info["demonstration_seed"] is None  # the source's own: none drawn


# --- 3. the demonstrations' content -------------------------------------------------------------------
def test_edited_demonstrations_under_the_same_keys_are_two_rows_of_sources(train_rows, monkeypatch):
    items = import_split(train_rows[:2], "test")
    demos = [{"question": f"q{i}?", "choices": ["yes", "no"], "answer": "yes", "rationale": f"r{i}", "key": None}
             for i in range(6)]
    source = causal_source("hand-demos", seed=1, demonstrations=demos)
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: Recorder())
    run_to_end(generation_job_create(kind="rationales", source=source, item_ids=[items[0].pk], enqueue=False))
    source.demonstrations = [{**d, "rationale": d["rationale"] + " (edited)"} for d in demos]
    source.save()
    run_to_end(generation_job_create(kind="rationales", source=source, item_ids=[items[1].pk], enqueue=False))
    infos = [Rationale.objects.get(source=source, item=i).generation_info for i in items]
    assert infos[0]["demonstrations"] == infos[1]["demonstrations"] == [None] * 6

    study = StudyFactory(dataset=items[0].dataset)
    study.items.add(*items)
    study.sources.add(source)
    rows = _sources(study)["hand-demos"]["generation"]
    assert len(rows) == 2, rows
    assert {r["demonstrations_fingerprint"] for r in rows} == {i["demonstrations_fingerprint"] for i in infos}
    note = sources_notes({"sources": {"hand-demos": _sources(study)["hand-demos"]}})[0]
    assert all(f"demonstrations {i['demonstrations_fingerprint']}" in note for i in infos)


# --- 4. the checkpoint -----------------------------------------------------------------------------------
class T5Recorder(Recorder):
    kind = "seq2seq"

    def __init__(self):
        super().__init__(reply="<extra_id_0> yes <extra_id_1> because it is so. <extra_id_2>")


def test_rationales_of_a_replaced_checkpoint_are_another_row_of_sources(lab, monkeypatch):  # noqa: F811
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: T5Recorder())
    source, dataset = lab["source"], lab["dataset"]
    dev = list(dataset.items.filter(split="dev").order_by("pk"))
    run_to_end(generation_job_create(kind="rationales", source=source, item_ids=[dev[0].pk], enqueue=False))
    _xavier_replaces(lab)
    source.refresh_from_db()
    run_to_end(generation_job_create(kind="rationales", source=source, item_ids=[dev[1].pk], enqueue=False))
    infos = [Rationale.objects.get(source=source, item=i).generation_info for i in dev[:2]]
    assert infos[0]["checkpoint"] and infos[1]["checkpoint"] and infos[0]["checkpoint"] != infos[1]["checkpoint"]

    study = StudyFactory(dataset=dataset)
    study.items.add(*dev[:2])
    study.sources.add(source)
    rows = _sources(study)["ft-x"]["generation"]
    assert len(rows) == 2 and len({r["checkpoint_hash"] for r in rows}) == 2, rows
    note = sources_notes({"sources": {"ft-x": _sources(study)["ft-x"]}})[0]
    assert all(f"checkpoint {r['checkpoint_hash']}" in note for r in rows)


def test_a_source_added_over_the_same_folder_leaves_the_checkpoint_one_row_of_sources(lab, monkeypatch):  # noqa: F811
    """The review's probe: a job on ``ft-x``, then a source ``ft-x-alias`` added over the same folder
    (the same training record), then another job on ``ft-x``. Before, the second job's rationales
    recorded ``{'1': fp, '2': fp}`` against the first's ``{'1': fp}`` (live, keyed by source id), and
    ``sources`` split one set of weights into two rows."""
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: T5Recorder())
    source, dataset = lab["source"], lab["dataset"]
    dev = list(dataset.items.filter(split="dev").order_by("pk"))
    run_to_end(generation_job_create(kind="rationales", source=source, item_ids=[dev[0].pk], enqueue=False))
    RationaleSourceFactory(name="ft-x-alias", kind="lm", backend="seq2seq",
                           model_name_or_path=source.model_name_or_path, training=source.training)
    job = run_to_end(generation_job_create(kind="rationales", source=source, item_ids=[dev[1].pk], enqueue=False))
    assert job.status == "done", job.error
    infos = [Rationale.objects.get(source=source, item=i).generation_info for i in dev[:2]]
    assert infos[0]["checkpoint"] == infos[1]["checkpoint"], [i["checkpoint"] for i in infos]
    assert isinstance(infos[1]["checkpoint"], list) and len(infos[1]["checkpoint"]) == 1

    study = StudyFactory(dataset=dataset)
    study.items.add(*dev[:2])
    study.sources.add(source)
    rows = _sources(study)["ft-x"]["generation"]
    assert len(rows) == 1 and rows[0]["n_rationales"] == 2, rows


def test_a_sources_own_demonstrations_from_another_dataset_match_the_jobs_items_by_question_text_only(
        train_rows, monkeypatch):
    """The review's probe: a source's own demonstrations keyed like the job's items' external ids
    but from another dataset (other questions). Before, the keys alone flagged the job's items as
    shown in their own prompt (the job's note and their rationales' ``own_item_in_demonstrations``)."""
    items = import_split(train_rows[:3], "test")
    demos = [{"question": f"Another dataset's question {n}?", "choices": ["yes", "no"], "answer": "yes",
              "rationale": f"Another dataset's rationale {n}.", "key": key}
             for n, key in enumerate([i.external_id for i in items] + ["x4", "x5", "x6"])]
    source = causal_source("other-ds-demos", seed=1, demonstrations=demos)
    monkeypatch.setattr(rationales_module, "source_backend", lambda *a, **k: Recorder())
    job = generation_job_create(kind="rationales", source=source, item_ids=[i.pk for i in items],
                                dataset=items[0].dataset, enqueue=False)
    assert job.params["demonstrations_from"] == rationales_module.SOURCE_DEMONSTRATIONS
    run_to_end(job)
    infos = [r.generation_info for r in Rationale.objects.filter(source=source)]
    assert len(infos) == 3 and not any(i.get("own_item_in_demonstrations") for i in infos)
