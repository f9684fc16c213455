#!/usr/bin/env bash
# System packages the test suite needs: Debian's Chromium (browser tests) and docker-compose 1.x
# (only to validate docker-compose.yml; no Docker engine is needed), PgBouncer (tests/test_pgbouncer.py
# runs the app behind one in transaction mode; it skips without it). Installed once, then skipped.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "Installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
