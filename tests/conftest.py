"""Fixtures shared by the whole suite."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Real research data lives beside the project (never inside it): ../shared/data.
SHARED_DATA = Path(os.environ.get("RL_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data folder not found at {SHARED_DATA} (set RL_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def strategyqa_dir(shared_data: Path) -> Path:
    return shared_data / "strategyqa"


@pytest.fixture(scope="session")
def openbookqa_dir(shared_data: Path) -> Path:
    return shared_data / "openbookqa"
