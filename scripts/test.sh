#!/usr/bin/env bash
# Runs the test suite with the services it needs: a throwaway PostgreSQL on 127.0.0.1 (stopped by PID after).
# Two pytest-xdist workers, a module to each in turn (tests/conftest.py groups them): much of the suite waits on
# subprocesses and services, so two workers fill the cores. ABLATE_TEST_WORKERS=0 runs it in this one process.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
"$here/scripts/system-deps.sh"
pgdir=$(mktemp -d /tmp/ablate-pg.XXXXXX)
trap '"$here/scripts/postgres.sh" stop "$pgdir" || true; rm -rf "$pgdir"' EXIT
ABLATE_TEST_PG_URL=$("$here/scripts/postgres.sh" start "$pgdir")
export ABLATE_TEST_PG_URL
cd "$here"
"$venv/bin/python" -m pytest -n "${ABLATE_TEST_WORKERS:-2}" --dist loadgroup "$@"
