#!/usr/bin/env bash
# PostgreSQL for the API store's tests (and for trying the API on PostgreSQL), idempotent.
#
#   deploy/install-postgres.sh install   Debian's postgresql package, when initdb is missing
#   deploy/install-postgres.sh start     install, then a private cluster on 127.0.0.1:$PGPORT
#                                        (role and database "fleetwatch", password "fleetwatch",
#                                        may create databases); prints its SQLAlchemy URL
#   deploy/install-postgres.sh url       the URL (exit 1 if the cluster is not running)
#   deploy/install-postgres.sh stop      stop the private cluster (its data stays)
#
# PGPORT defaults to 25432, away from a system cluster on 5432 and below Linux's ephemeral ports
# (32768-60999: a client connection may hold a port there). As root the cluster runs as the
# `postgres` user with its data in /var/lib/postgresql/fleetwatch-$PGPORT; as another user, as
# that user under ~/.cache/fleetwatch-postgres-$PGPORT.
set -euo pipefail
action="${1:-start}"
port="${PGPORT:-25432}"

find_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

install() {
  if find_bin >/dev/null; then return 0; fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "fleetwatch: PostgreSQL is not installed and apt-get is unavailable; install postgresql" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "fleetwatch: installing PostgreSQL needs root (apt-get install postgresql)" >&2; exit 1
    fi
  fi
  echo "fleetwatch: installing postgresql from Debian packages" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  # the package may start a system cluster on :5432; fleetwatch runs its own
  if command -v service >/dev/null 2>&1; then $sudo service postgresql stop >/dev/null 2>&1 || true; fi
}

if [ "$(id -u)" -eq 0 ]; then
  data="/var/lib/postgresql/fleetwatch-$port"
  as_owner() { runuser -u postgres -- "$@"; }
else
  data="${HOME}/.cache/fleetwatch-postgres-$port"
  as_owner() { "$@"; }
fi
url="postgresql+psycopg://fleetwatch:fleetwatch@127.0.0.1:$port/fleetwatch"

running() {
  local bin; bin=$(find_bin) || return 1
  [ -f "$data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

start() {
  install
  local bin; bin=$(find_bin)
  if running; then echo "$url"; return 0; fi
  if [ "$(id -u)" -eq 0 ]; then
    mkdir -p "$data" && chown postgres:postgres "$data" && chmod 700 "$data"
  else
    mkdir -p "$data" && chmod 700 "$data"
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtA -v ON_ERROR_STOP=1 <<SQL >/dev/null
SELECT 'CREATE ROLE fleetwatch LOGIN CREATEDB PASSWORD ''fleetwatch'''
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fleetwatch') \gexec
SELECT 'CREATE DATABASE fleetwatch OWNER fleetwatch'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'fleetwatch') \gexec
SQL
  echo "$url"
}

case "$action" in
  install) install ;;
  start) start ;;
  url) if running; then echo "$url"; else exit 1; fi ;;
  stop)
    if running; then as_owner "$(find_bin)/pg_ctl" -D "$data" -m fast -w stop >/dev/null; fi ;;
  *) echo "usage: $0 install|start|url|stop" >&2; exit 2 ;;
esac
