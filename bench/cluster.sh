#!/usr/bin/env bash
# bench/cluster.sh: the cost of running cordon-server on PostgreSQL and as
# two servers, next to one server on SQLite (the baseline), in one run on
# this machine, with bench_loadgen (bench/loadgen.c) as N devices that
# answer every job at once (so what is measured is the servers):
#   1. one server, SQLite (the embedded default)
#   2. one server, PostgreSQL 15 (a throwaway cluster, fsync on unless
#      CORDON_PG_FSYNC=off)
#   3. two servers on that PostgreSQL, one identity (init --keys-from):
#      the devices connect to A, every job is dispatched through B's admin
#      socket, so each one is routed through the database (LISTEN/NOTIFY,
#      docs/ARCHITECTURE.md "Cluster")
# Each prints jobs/s with CONC dispatches in flight and the median and p99
# from dispatch to stored result; the last line sums it up. A figure for the
# cost, not a claim of scaling: both servers and PostgreSQL share this
# machine's cores with the load generator.
# CORDON_BENCH_ROUND_TRIPS=1 adds, after 2., the round trips to PostgreSQL
# per job: the server's sendto calls under strace -c over 1,000 more jobs
# (libpq sends each statement, or each pipeline of them, in one).
# Usage: bench/cluster.sh [BUILD_DIR] [DEVICES] [JOBS] [CONC]   (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
devices=${2:-100}
jobs=${3:-10000}
conc=${4:-32}
server="$build/cordon-server"
loadgen="$build/bench_loadgen"
[ -x "$server" ] && [ -x "$loadgen" ] || { echo "cluster: build $build first (bench_loadgen)" >&2; exit 2; }
work=$(mktemp -d /tmp/cordon-bench-cluster-XXXXXX)
chmod 711 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/pg-temp.sh stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

port_of() { # the port a server logged
  local log=$1
  for _ in $(seq 200); do
    # (the log may not exist yet: the server's shell has not opened it)
    p=$(sed -n 's/.*msg=listening listen=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" 2>/dev/null | tail -n1 || true)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.05
  done
  echo "cluster: a server did not start: $(tail -n 3 "$log")" >&2
  return 1
}

start_server() { # STATE LOG (in this shell, so that cleanup knows its pid)
  "$server" run --state "$1" --listen 127.0.0.1:0 --drain-timeout 0 >>"$2" 2>&1 &
  pids+=($!)
}

# one configuration: devices on DEV_PORT, jobs dispatched through ADMIN_STATE
run_case() { # NAME DEV_PORT ADMIN_STATE
  local name=$1 port=$2 admin=$3 out
  out=$(printf 'pair\nconnect\ndispatch 500 %s %s 0\ndispatch %s %s %s 0\nstats\n' \
    "$devices" "$conc" "$jobs" "$devices" "$conc" |
    "$loadgen" --server "127.0.0.1:$port" --state "$admin" --devices "$devices" \
      --ids "$work/ids-$name" --package "$work/n.cpkg" 2>"$work/loadgen-$name.log")
  local line stats
  line=$(echo "$out" | grep '^dispatch ok' | tail -n1)
  stats=$(echo "$out" | grep '^stats ok' | tail -n1)
  [ -n "$line" ] || { echo "cluster: $name: $(echo "$out" | tail -n 3) $(tail -n 3 "$work/loadgen-$name.log")" >&2; return 1; }
  local jps p50 p99 failed dup
  jps=$(echo "$line" | sed -n 's/.*jobs_per_s=\([0-9.]*\).*/\1/p')
  p50=$(echo "$line" | sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p')
  p99=$(echo "$line" | sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p')
  failed=$(echo "$line" | sed -n 's/.* failed=\([0-9]*\).*/\1/p')
  dup=$(echo "$stats" | sed -n 's/.*dup_jobs=\([0-9]*\).*/\1/p')
  printf '  %-34s %8.1f jobs/s  median %6.2f ms  p99 %7.2f ms  failed %s  duplicated %s\n' \
    "$name" "$jps" "$p50" "$p99" "$failed" "$dup"
  result_jps=$jps
}

mkdir -p "$work/p"
echo '{"name":"n","version":"1","entry":["/bin/true"]}' >"$work/p/manifest.json"

echo "cluster: $devices devices, $jobs jobs, $conc in flight; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. SQLite
"$server" init --state "$work/sqlite" >/dev/null 2>&1
"$server" pack "$work/p" -o "$work/n.cpkg" --state "$work/sqlite" >/dev/null 2>&1
start_server "$work/sqlite" "$work/sqlite.log"
port=$(port_of "$work/sqlite.log")
run_case "one server, SQLite" "$port" "$work/sqlite"
sqlite_jps=$result_jps
kill -9 "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true

# 2. PostgreSQL, one server (a package signed by A's key: B shares it)
url=$(CORDON_PG_FSYNC=${CORDON_PG_FSYNC:-on} scripts/pg-temp.sh start "$work/pg")
"$server" init --state "$work/a" --db "$url" >/dev/null 2>&1
"$server" pack "$work/p" -o "$work/n.cpkg" --state "$work/a" >/dev/null 2>&1
start_server "$work/a" "$work/a.log"
port_a=$(port_of "$work/a.log")
run_case "one server, PostgreSQL" "$port_a" "$work/a"
pg1_jps=$result_jps
rt=""
if [ "${CORDON_BENCH_ROUND_TRIPS:-0}" = 1 ]; then
  rt_jobs=1000
  strace -f -qq -c -e trace=sendto -o "$work/strace-a" -p "${pids[-1]}" &
  st=$!
  sleep 1 # attached
  printf 'connect\ndispatch %s %s %s 0\n' "$rt_jobs" "$devices" "$conc" |
    "$loadgen" --server "127.0.0.1:$port_a" --state "$work/a" --devices "$devices" \
      --ids "$work/ids-one server, PostgreSQL" --package "$work/n.cpkg" >/dev/null 2>"$work/loadgen-rt.log"
  kill -INT "$st"
  wait "$st" || true
  calls=$(awk '$NF == "sendto" { print $4 }' "$work/strace-a")
  rt=$(awk -v c="${calls:-0}" -v j="$rt_jobs" 'BEGIN { printf "%.1f", c / j }')
  printf '  %-34s %8s per job (%s sendto over %s jobs, under strace)\n' \
    "round trips to PostgreSQL" "$rt" "${calls:-0}" "$rt_jobs"
  rt=" pg_round_trips_per_job=$rt"
fi

# 3. a second server of A's cluster: devices on A, jobs through B
"$server" init --state "$work/b" --db "$url" --keys-from "$work/a" >/dev/null 2>&1
start_server "$work/b" "$work/b.log"
port_of "$work/b.log" >/dev/null
# the same devices again, still connected to A's cluster (their identities)
cp "$work/ids-one server, PostgreSQL" "$work/ids-two servers, routed A<-B"
run_case "two servers, routed A<-B" "$port_a" "$work/b"
pg2_jps=$result_jps

echo "cluster: devices=$devices sqlite_jobs_per_s=$sqlite_jps pg_jobs_per_s=$pg1_jps pg_two_servers_routed_jobs_per_s=$pg2_jps$rt"
