#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on localhost; start them when they are installed but down.
# Exits non-zero, loudly, when either cannot be reached: the test suite never silently skips them.
set -uo pipefail
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! pg_up; then
  echo "PostgreSQL is down; starting it"
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
if ! redis_up; then
  echo "Redis is down; starting it"
  if command -v redis-server >/dev/null; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
  fi
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
fi
ok=0
pg_up || { echo "ERROR: PostgreSQL is not reachable on 127.0.0.1:5432" >&2; ok=1; }
redis_up || { echo "ERROR: Redis is not reachable on 127.0.0.1:6379" >&2; ok=1; }
exit $ok
