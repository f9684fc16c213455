#!/usr/bin/env bash
# Create .venv and install the project. Usage: scripts/bootstrap.sh [EXTRAS]  (e.g. "lm,test")
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install --quiet -e ".[${extras}]"
else
  .venv/bin/python -m pip install --quiet -e .
fi
