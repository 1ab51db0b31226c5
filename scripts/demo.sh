#!/usr/bin/env bash
# cordon end to end on loopback, in a temporary directory: a server with a
# user, an agent paired with a single-use code, a signed package dispatched
# to it and run under the strongest sandbox the device gives. Everything it
# starts is stopped at the end. Installs what is missing on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --runtime
scripts/test-setup.sh --job-user >/dev/null
# the two programs only, in a build directory of their own (no tests)
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_TESTS=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" --target cordon-server cordon-agent >/dev/null
B=$PWD/build-demo
work=$(mktemp -d /tmp/cordon-demo-XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say() { printf '\n== %s\n' "$*"; }

say "cordon-server init"
$B/cordon-server init --state "$work/state"
$B/cordon-server run --state "$work/state" --listen "127.0.0.1:$port" 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$work/server.log" && break; sleep 0.1; done

say "cordon-server user add alice; pair-code alice"
$B/cordon-server user add alice --state "$work/state"
code=$($B/cordon-server pair-code alice --state "$work/state" 2>/dev/null | head -n 1)
echo "code: $code"

say "cordon-agent pair (both sides print the same authentication string)"
echo "$code" | $B/cordon-agent --config "$work/agent" pair --server "127.0.0.1:$port" --name laptop
grep "authentication_string=" "$work/server.log"

say "cordon-agent run; cordon-server devices"
$B/cordon-agent --config "$work/agent" run 2>"$work/agent.log" &
pids+=($!)
for _ in $(seq 50); do grep -q connected "$work/agent.log" && break; sleep 0.1; done
$B/cordon-server devices --user alice --state "$work/state"

say "cordon-server pack examples/hello; dispatch --wait -- world"
$B/cordon-server pack examples/hello -o "$work/hello.cpkg" --state "$work/state"
$B/cordon-server dispatch --user alice "$work/hello.cpkg" --wait --state "$work/state" -- world

say "cordon-server jobs"
$B/cordon-server jobs --user alice --state "$work/state"
