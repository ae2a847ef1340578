#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster on 127.0.0.1 for the tests.
#   scripts/postgres.sh start DIR   -> installs Debian's postgresql if needed, initdb + pg_ctl start as the
#                                      postgres user, creates database "ablate", prints its SQLAlchemy URL
#                                      (on ABLATE_PG_PORT, else a free port)
#   scripts/postgres.sh stop DIR    -> stops the server by the PID in DIR/data/postmaster.pid
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}
# a free port unless one is given: two test suites on one machine must not take each other's server
port=${ABLATE_PG_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)

if [ "$cmd" = start ]; then
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
  fi
  mkdir -p "$dir"; chown postgres:postgres "$dir"; chmod 700 "$dir"
  as_pg() { su postgres -s /bin/bash -c "$*"; }
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_pg "$bin/initdb -D '$dir/data' -U postgres --auth=trust -E UTF8" >&2
  fi
  as_pg "$bin/pg_ctl -D '$dir/data' -l '$dir/server.log' -w -t 60 \
    -o \"-c listen_addresses=127.0.0.1 -p $port -k '$dir' -c max_connections=200 -c fsync=off\" start" >&2
  as_pg "$bin/psql -h 127.0.0.1 -p $port -U postgres -tAc \"SELECT 1 FROM pg_database WHERE datname='ablate'\"" \
    | grep -q 1 || as_pg "$bin/createdb -h 127.0.0.1 -p $port -U postgres ablate" >&2
  echo "postgresql+psycopg://postgres@127.0.0.1:$port/ablate"
elif [ "$cmd" = stop ]; then
  pidfile="$dir/data/postmaster.pid"
  if [ -f "$pidfile" ]; then
    pid=$(head -n1 "$pidfile")
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
else
  echo "usage: $0 start|stop DIR" >&2; exit 2
fi
