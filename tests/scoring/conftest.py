"""Fixtures of the scoring tests: the StrategyQA test split built directly from the shared data
(the studies importers are another area's work), and studies over it."""
from __future__ import annotations

import json

import pytest

from studies.models import YES_NO_CHOICES, Dataset, Item, Study


@pytest.fixture
def strategyqa_test_items(db, strategyqa_dir):
    dataset = Dataset.objects.create(name="StrategyQA", task_format=Dataset.TaskFormat.YES_NO)
    rows = json.loads((strategyqa_dir / "strategyqa_processed_test.json").read_text())
    Item.objects.bulk_create([
        Item(dataset=dataset, external_id=r["qid"], question=r["question"], choices=list(YES_NO_CHOICES),
             gold_answer="yes" if r["answer"] else "no", gold_rationale=r["rationale"], split="test")
        for r in rows
    ])
    return dataset


@pytest.fixture
def imported_study(strategyqa_test_items):
    return Study.objects.create(name="Joshi et al. 2023 released outcomes", dataset=strategyqa_test_items, split="test")


@pytest.fixture
def utility_file(strategyqa_dir):
    return strategyqa_dir / "rationale_utility.json"
