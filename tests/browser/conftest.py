"""Real browser tests: Debian's headless Chromium driven by Playwright, against pytest-django's
``live_server``. Never downloads a browser (no ``playwright install``)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in the test thread; the ORM calls of the tests are
# still synchronous and single-threaded here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("RL_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def pytest_collection_modifyitems(config, items):
    if Path(CHROMIUM).exists():
        return
    if os.environ.get("RL_REQUIRE_SERVICES") == "1":
        raise pytest.UsageError(f"Chromium not found at {CHROMIUM}: scripts/system_deps.sh installs it")
    skip = pytest.mark.skip(reason=f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": ARGS}
