"""Fixtures shared by the whole suite."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Real research data lives beside the project (never inside it): ../shared/data.
SHARED_DATA = Path(os.environ.get("RL_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture
def migration_executor():
    """A migration executor for a test that moves the schema back and forth (mark it
    ``django_db(transaction=True)``); afterwards every app is migrated to its latest state again,
    so the tests that follow find the schema they expect."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    yield MigrationExecutor(connection)
    final = MigrationExecutor(connection)
    final.migrate(final.loader.graph.leaf_nodes())


@pytest.fixture
def migrate_to(migration_executor):
    """``migrate_to(targets)`` moves the schema to ``targets`` and returns the historical apps there
    (a new executor each time, so its graph knows what the earlier moves applied); afterwards the
    schema is back at the latest migrations (``migration_executor``)."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    def move(targets):
        executor = MigrationExecutor(connection)
        executor.migrate(targets)
        return executor.loader.project_state(targets).apps

    return move


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


# With RL_REQUIRE_SERVICES=1 these must be importable: their tests would otherwise skip.
REQUIRED_MODULES = ("torch", "bert_score")


def missing_modules(names=REQUIRED_MODULES) -> list[str]:
    """The modules of ``names`` that cannot be found (nothing is imported: torch takes seconds)."""
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def pytest_sessionstart(session):
    """With RL_REQUIRE_SERVICES=1 (the CI run) the suite must really use PostgreSQL, Redis, torch
    and bert-score (and Chromium, tests/browser/conftest.py): fail loudly rather than fall back or
    skip."""
    if os.environ.get("RL_REQUIRE_SERVICES") != "1":
        return
    missing = missing_modules()
    if missing:
        raise pytest.UsageError(
            f"RL_REQUIRE_SERVICES=1 but {', '.join(missing)} cannot be imported: install the lm extra "
            "(.venv/bin/pip install -e '.[lm,test]'; scripts/test.sh does)"
        )
    import django
    from django.conf import settings

    django.setup()
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        raise pytest.UsageError(f"RL_REQUIRE_SERVICES=1 but the database engine is {engine}")
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001 - any failure is fatal here
        raise pytest.UsageError(
            f"RL_REQUIRE_SERVICES=1 but Redis at {settings.REDIS_URL!r} is unreachable: {exc}"
        ) from exc
