"""Fixtures of the scoring tests: the StrategyQA test split built directly from the shared data
(the studies importers are another area's work), and studies over it. The split's file is read
once per run (``strategyqa_test_rows``)."""
from __future__ import annotations

import json

import pytest

from tests.scoring.released import imported_study_create, strategyqa_items_create


@pytest.fixture(scope="session")
def strategyqa_test_rows(strategyqa_dir) -> list[dict]:
    """The released test split, read once for the whole run."""
    return json.loads((strategyqa_dir / "strategyqa_processed_test.json").read_text())


@pytest.fixture
def strategyqa_test_items(db, strategyqa_test_rows):
    return strategyqa_items_create(strategyqa_test_rows)


@pytest.fixture
def imported_study(strategyqa_test_items):
    return imported_study_create(strategyqa_test_items)


@pytest.fixture
def utility_file(strategyqa_dir):
    return strategyqa_dir / "rationale_utility.json"


@pytest.fixture
def utility_study():
    """Four yes/no items, each with a rationale of ``good-lm`` (right) and of ``bad-lm`` (wrong):
    (study, items, good, bad)."""
    from tests.factories import ItemFactory, RationaleFactory, RationaleSourceFactory, StudyFactory

    study = StudyFactory(annotators_per_unit=5)
    good, bad = RationaleSourceFactory(name="good-lm"), RationaleSourceFactory(name="bad-lm")
    items = [ItemFactory(dataset=study.dataset, gold_answer="yes", gold_rationale="The sky is blue.") for _ in range(4)]
    for it in items:
        RationaleFactory(item=it, source=good, prediction_correct=True, text="The sky is blue indeed.")
        RationaleFactory(item=it, source=bad, prediction_correct=False, text="Bananas are yellow.")
    return study, items, good, bad
