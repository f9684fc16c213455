"""Fixtures for the studies tests: real files imported through the real importers."""
from __future__ import annotations

from pathlib import Path

import pytest

from studies.services.importers import items_import_strategyqa
from tests.studies.helpers import olgas_lab


@pytest.fixture
def sqa_test_file(strategyqa_dir: Path) -> Path:
    return strategyqa_dir / "strategyqa_processed_test.json"


@pytest.fixture
def sqa_test_imported(db, sqa_test_file):
    """The StrategyQA test split imported into the dataset "StrategyQA"."""
    return items_import_strategyqa(file=sqa_test_file)


@pytest.fixture
def olgas(db):
    """Olga's open study and her train item "train-0" with its rationale (``helpers.olgas_lab``)."""
    return olgas_lab()
