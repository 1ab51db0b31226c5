#!/bin/sh
# bench/fsync_count.sh [BUILD_DIR] [JOBS]: the durable writes of a dispatch.
# Starts a server and a paired agent on loopback, each under
# `strace -f -e trace=fsync,fdatasync`, runs JOBS (default 5)
# `dispatch --wait` of a /bin/true package one after another, and prints
# the fsync + fdatasync calls per job on each side (the calls made while
# the two start are not counted). Run as root, like the benchmarks.
set -eu
build=$(cd "${1:-build}" && pwd)
jobs=${2:-5}
server="$build/cordon-server"
agent="$build/cordon-agent"
dir=$(mktemp -d /tmp/cordon-fsync-XXXXXX)
chmod 755 "$dir"
spid=""
apid=""
# stop the program strace runs (strace itself would only detach)
stop() {
  [ -n "$1" ] || return 0
  for c in $(ps -o pid= --ppid "$1"); do kill "$c" 2>/dev/null || true; done
  wait "$1" 2>/dev/null || true
}
cleanup() {
  stop "$apid"
  stop "$spid"
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
state="$dir/state"
mkdir -p "$dir/p" "$dir/agent"
chmod 700 "$dir/agent"
echo '{"name":"t","version":"1","entry":["/bin/true"]}' >"$dir/p/manifest.json"
"$server" init --state "$state" >/dev/null 2>&1
"$server" user add alice --state "$state" >/dev/null 2>&1
"$server" pack "$dir/p" -o "$dir/t.cpkg" --state "$state" >/dev/null 2>&1
strace -f -qq -y -e trace=fsync,fdatasync -o "$dir/server.trace" \
  "$server" run --state "$state" --listen 127.0.0.1:0 >"$dir/server.log" 2>&1 &
spid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.* listen=127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$dir/server.log" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "fsync_count: the server did not start" >&2; exit 1; }
code=$("$server" pair-code alice --state "$state" 2>/dev/null | head -n 1)
"$agent" --config "$dir/agent" pair --server "127.0.0.1:$port" --code "$code" >/dev/null 2>&1
strace -f -qq -y -e trace=fsync,fdatasync -o "$dir/agent.trace" \
  "$agent" --config "$dir/agent" run >"$dir/agent.log" 2>&1 &
apid=$!
# one job first: the agent is connected and every lazy file exists
timeout 60 "$server" dispatch --user alice "$dir/t.cpkg" --wait --state "$state" >/dev/null 2>&1
sleep 0.5
s0=$(wc -l <"$dir/server.trace")
a0=$(wc -l <"$dir/agent.trace")
i=0
while [ "$i" -lt "$jobs" ]; do
  timeout 60 "$server" dispatch --user alice "$dir/t.cpkg" --wait --state "$state" >/dev/null 2>&1
  i=$((i + 1))
done
sleep 0.5 # the acks and whatever follows the result
# per side: the calls after the warm-up job, by the file they synced
# (strace -y names it; a directory is shown as itself)
count() { # TRACE SKIP SIDE
  tail -n +"$(($2 + 1))" "$1" | grep -E 'fsync|fdatasync' |
    sed -n 's/.*\(fsync\|fdatasync\)([0-9]*<\([^>]*\)>.*/\2/p' |
    sed -e "s|^$dir/||" -e 's|[0-9a-f]\{32\}|<id>|g' -e 's|\.<id>|<id>|' |
    sort | uniq -c | awk -v n="$jobs" -v side="$3" '
      { total += $1; printf "    %-34s %.1f per job\n", $2, $1 / n }
      END { printf "  %s: %.1f fsync/fdatasync per job\n", side, total / n }'
}
echo "fsync_count: $jobs jobs, dispatch --wait of /bin/true on loopback"
count "$dir/server.trace" "$s0" server
count "$dir/agent.trace" "$a0" agent
if [ -n "${FSYNC_COUNT_SHOW:-}" ]; then
  tail -n 40 "$dir/server.trace" "$dir/agent.trace"
fi
