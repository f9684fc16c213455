"""Fixtures for the LM worker tests: StrategyQA items in the database and tiny models built
locally (no downloads), saved to a session folder and loaded by path like real models."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from studies.lm import templates

N_TRAIN_ROWS = 60


def _rows(strategyqa_dir: Path, split: str) -> list[dict]:
    return json.loads((strategyqa_dir / f"strategyqa_processed_{split}.json").read_text())


@pytest.fixture(autouse=True)
def model_dir(settings, tmp_path) -> Path:
    """A fresh ``RL_MODEL_DIR`` for each test: the folders a job publishes there belong to the
    sources of the test's database, which is rolled back after it (a folder left by an earlier
    test would be taken: ``lifecycle.output_name_check``)."""
    settings.RL_MODEL_DIR = tmp_path / "models"
    settings.RL_MODEL_DIR.mkdir()
    return settings.RL_MODEL_DIR


@pytest.fixture(scope="session")
def strategyqa_train_rows(strategyqa_dir) -> list[dict]:
    return _rows(strategyqa_dir, "train")[:N_TRAIN_ROWS]


@pytest.fixture(scope="session")
def strategyqa_dev_rows(strategyqa_dir) -> list[dict]:
    return _rows(strategyqa_dir, "dev")


@pytest.fixture(scope="session")
def strategyqa_generalisation(strategyqa_dir) -> dict:
    return json.loads((strategyqa_dir / "generalisation_final_train.json").read_text())


def question_demos(rows: list[dict], generalisation: dict) -> dict[str, list[templates.QuestionDemo]]:
    """Six demonstrations per type from the released train generalization questions."""
    demos: dict[str, list[templates.QuestionDemo]] = {t: [] for t in templates.QUESTION_TYPES}
    for row in rows:
        for text, answer, qtype in generalisation.get(row["question"], []):
            if len(demos[qtype]) < templates.N_DEMONSTRATIONS and text.strip():
                demos[qtype].append(templates.QuestionDemo(
                    question=row["question"], output=" ".join(text.split()), answer=answer,
                    context=" ".join(row["facts"])))
    return demos


class TinyModels(Mapping):
    """The tiny models by name, each built (trained briefly and saved under ``root``) the first
    time a test reads it, then kept for the session: a test run that needs one model builds one."""

    def __init__(self, root: Path, rows: list[dict], generalisation: dict):
        from tests import tiny_models as tiny

        self.root, self.rows, self.generalisation, self.built = root, rows, generalisation, {}
        self.items = tiny.strategyqa_prompt_items(rows)
        self.builders = {
            "t5": lambda: tiny.build_tiny_t5(root / "t5", self.items, steps=50),
            "t5_questions": lambda: tiny.build_tiny_t5(root / "t5-questions", self.items, steps=80,
                                                       extra_pairs=self.question_pairs(), batch_size=4,
                                                       max_source_length=128),
            "t5_answerer": lambda: tiny.build_tiny_t5(root / "t5-answerer", self.items, steps=30,
                                                      extra_pairs=self.answer_pairs()),
            "gpt2": lambda: tiny.build_tiny_gpt2(root / "gpt2", self.items, steps=150),
            "classifier": lambda: tiny.build_tiny_classifier(root / "classifier", self.items, steps=40),
        }

    def __getitem__(self, name: str) -> Path:
        if name not in self.built:
            self.built[name] = self.builders[name]()
        return self.built[name]

    def __iter__(self):
        return iter(self.builders)

    def __len__(self) -> int:
        return len(self.builders)

    def question_pairs(self) -> list[tuple[str, str]]:
        demos = question_demos(self.rows, self.generalisation)
        pairs = []
        for row, item in zip(self.rows, self.items, strict=True):
            for text, answer, qtype in self.generalisation.get(row["question"], []):
                prompt = templates.generalization_prompt(
                    qtype, instruction=templates.DEFAULT_INSTRUCTIONS[qtype], demonstrations=demos[qtype],
                    question=item.question, context=item.facts)
                pairs.append((prompt, " ".join(text.split()) + f"\nanswer: {answer}"))
        return pairs

    def answer_pairs(self) -> list[tuple[str, str]]:
        pairs = []
        for item in self.items:  # F^I and F^IR formats, so the answerers learn to emit a label
            pairs.append((templates.t5_answer_input(item), templates.t5_answer_target(item)))
            pairs.append((templates.t5_answer_with_rationale_input(item, item.rationale),
                          templates.t5_answer_target(item)))
        return pairs


@pytest.fixture(scope="session")
def lm_models(tmp_path_factory, strategyqa_train_rows, strategyqa_generalisation) -> TinyModels:
    """Tiny T5 rationalizer, T5 question generator, T5 answerer, GPT-2 and a BERT classifier,
    trained briefly, each when a test first reads it (``lm_models["t5"]``)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)
    return TinyModels(tmp_path_factory.mktemp("lm-models"), strategyqa_train_rows, strategyqa_generalisation)


@pytest.fixture
def strategyqa_dataset(db):
    from studies.models import Dataset

    return Dataset.objects.create(name="strategyqa", task_format=Dataset.TaskFormat.YES_NO)


def make_items(dataset, rows: list[dict], split: str):
    from studies.models import YES_NO_CHOICES, Item

    return Item.objects.bulk_create([
        Item(dataset=dataset, external_id=row["qid"], question=row["question"], choices=list(YES_NO_CHOICES),
             gold_answer="yes" if row["answer"] else "no", gold_rationale=row["rationale"], split=split,
             metadata={"facts": row["facts"]})
        for row in rows
    ])


@pytest.fixture
def dev_items(strategyqa_dataset, strategyqa_dev_rows):
    return make_items(strategyqa_dataset, strategyqa_dev_rows[:50], "dev")


@pytest.fixture
def train_items(strategyqa_dataset, strategyqa_train_rows):
    return make_items(strategyqa_dataset, strategyqa_train_rows, "train")


@pytest.fixture
def splits(strategyqa_dataset, strategyqa_train_rows, strategyqa_dev_rows):
    """The Quark tests' items: 8 train, 6 dev (validation) and 8 test (held-out)."""
    return {"train": make_items(strategyqa_dataset, strategyqa_train_rows[:8], "train"),
            "dev": make_items(strategyqa_dataset, strategyqa_dev_rows[:6], "dev"),
            "test": make_items(strategyqa_dataset, strategyqa_dev_rows[6:14], "test")}


@pytest.fixture
def fresh_quark_runs():
    """No Quark run left in this process's memory from another test, before or after."""
    from studies.services.generation import quark as quark_service

    quark_service.forget_runs()
    yield
    quark_service.forget_runs()
