#!/usr/bin/env bash
# A throwaway PostgreSQL 15 for the tests (Debian's postgresql-15):
#   scripts/pg-temp.sh start DIR   initdb in DIR/data, run it on a unix socket in
#                                  DIR (no TCP), print its base URL on stdout:
#                                  postgresql://USER@/postgres?host=DIR&port=5432
#   scripts/pg-temp.sh stop DIR    stop it and remove DIR
# The cluster runs as an unprivileged account: the invoking user when that is
# not root, else $CORDON_PG_USER (default cordon-pg, a system account of its
# own created when missing: never a test account, whose process count the
# sandbox tests rely on).
# Nothing listens on the network; trust authentication on the socket only.
set -euo pipefail
bindir=${CORDON_PG_BINDIR:-/usr/lib/postgresql/15/bin}
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$owner" -- "$@"
  else
    "$@"
  fi
}

if [ "$(id -u)" -eq 0 ]; then
  owner=${CORDON_PG_USER:-cordon-pg}
  id "$owner" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$owner"
else
  owner=$(id -un)
fi

case "$cmd" in
start)
  [ -x "$bindir/initdb" ] || { echo "pg-temp: no $bindir/initdb (apt-get install postgresql-15)" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ "$(id -u)" -eq 0 ] && chown "$owner" "$dir"
  chmod 0755 "$dir"
  as_owner "$bindir/initdb" -D "$dir/data" -U "$owner" -A trust -E UTF8 --locale=C.UTF-8 \
    --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  # a socket in DIR only; fsync off: a throwaway cluster, fast tests
  # (CORDON_PG_FSYNC=on for the benchmarks: durable as SQLite's commits are)
  fsync=${CORDON_PG_FSYNC:-off}
  case "$fsync" in on|off) ;; *) echo "pg-temp: CORDON_PG_FSYNC must be on or off" >&2; exit 2 ;; esac
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=$fsync -c max_connections=200" \
    start >/dev/null || { cat "$dir/postgres.log" >&2; exit 1; }
  echo "postgresql://$owner@/postgres?host=$dir&port=5432"
  ;;
stop)
  [ -d "$dir/data" ] || exit 0
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
