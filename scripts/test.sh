#!/usr/bin/env bash
# Runs the test suite with the services it needs: a throwaway PostgreSQL on 127.0.0.1 (stopped by PID after).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
"$here/scripts/system-deps.sh"
pgdir=$(mktemp -d /tmp/ablate-pg.XXXXXX)
trap '"$here/scripts/postgres.sh" stop "$pgdir" || true; rm -rf "$pgdir"' EXIT
ABLATE_TEST_PG_URL=$("$here/scripts/postgres.sh" start "$pgdir")
export ABLATE_TEST_PG_URL
cd "$here"
"$venv/bin/python" -m pytest "$@"
