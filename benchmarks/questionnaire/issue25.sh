#!/usr/bin/env bash
# Issue 25's measurements, in one go (README.md beside this file, "Issue 25"). Loopback only,
# every run bounded by load.py's own limits. Each run gets a freshly created database.
#   OLD=/work/wt-old8d   a worktree of the old code (git worktree add "$OLD" 8d96f68; any commit with load.py)
#   PY=.venv/bin/python  the virtual environment (the old code runs with the same one)
#   WHAT="paired options pgbouncer launch"   which parts to run (default: all)
# Output: one block per run on stdout (the Markdown tables of load.py), the load average before each.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OLD=${OLD:-/work/wt-old8d}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-rl_issue25}
WHAT=${WHAT:-"paired options pgbouncer launch"}
ROUNDS=${ROUNDS:-2}
LEVEL_SECONDS=${LEVEL_SECONDS:-12}  # measured seconds per level (load.py caps it at 60); longer on a slow machine

fresh() { dropdb -h 127.0.0.1 -U postgres --if-exists --force "$1" && createdb -h 127.0.0.1 -U postgres "$1"; }
run() {  # run LABEL DIR ARGS...: load.py of the code in DIR, on a fresh database
  local label=$1 dir=$2; shift 2
  fresh "$DB"
  echo; echo "### $label ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  (cd "$dir" && DATABASE_URL="$PG/$DB" "$PY" benchmarks/questionnaire/load.py "$@" --out "/tmp/issue25-$label.json" \
     2>&1 | grep -E '^(\||load average|requests per|database round)' )
}
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # absolute, not resolved: the venv link
NEW=$PWD

if [[ $WHAT == *paired* ]]; then  # closed loop, 20 and 50 workers, old and new alternating
  for round in $(seq "$ROUNDS"); do
    run "old-$round" "$OLD" --levels 20 50 --seconds "$LEVEL_SECONDS" --gunicorn-workers 3
    run "new-$round" "$NEW" --levels 20 50 --seconds "$LEVEL_SECONDS" --gunicorn-workers 3
  done
fi

if [[ $WHAT == *options* ]]; then  # gunicorn's options, closed loop
  run "sync-3" "$NEW" --levels 20 50 --seconds 12 --gunicorn-workers 3 --no-round-trips
  run "gthread-3x4" "$NEW" --levels 20 50 --seconds 12 --gunicorn-workers 3 --gunicorn-threads 4 --no-round-trips
  run "gthread-3x4-keepalive" "$NEW" --levels 20 50 --seconds 12 --gunicorn-workers 3 --gunicorn-threads 4 \
    --keep-alive --no-round-trips
  run "sync-2" "$NEW" --levels 20 50 --seconds 12 --gunicorn-workers 2 --no-round-trips
  run "deployed" "$NEW" --levels 20 50 --seconds 12 --deployed --no-round-trips
fi

if [[ $WHAT == *pgbouncer* ]]; then  # the same closed loop behind PgBouncer in transaction mode
  PGB=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  dir=$(mktemp -d /tmp/rl-pgbouncer-XXXX); chmod 777 "$dir"
  echo '"postgres" ""' > "$dir/users.txt"
  cat > "$dir/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6433
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 10
max_client_conn = 500
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
  chmod 666 "$dir"/*
  user=(); [ "$(id -u)" -eq 0 ] && user=(-u postgres)
  "$PGB" -d "${user[@]}" "$dir/pgbouncer.ini"
  sleep 1
  fresh "$DB"
  echo; echo "### pgbouncer ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  DATABASE_PGBOUNCER=1 DATABASE_URL="postgres://postgres@127.0.0.1:6433/$DB" "$PY" benchmarks/questionnaire/load.py \
    --levels 20 50 --seconds 12 --gunicorn-workers 3 --out /tmp/issue25-pgbouncer.json 2>&1 \
    | grep -E '^(\||load average|requests per|database round)' || true
  kill "$(cat "$dir/pgbouncer.pid")"
fi

if [[ $WHAT == *launch* ]]; then  # 1,000 workers within 10 s at human pace, 30,000 units, as deployed
  run "launch" "$NEW" --levels 1000 --seconds 45 --arrival 10 --think 3 7 --items 10000 --sources 3 --deployed
fi
