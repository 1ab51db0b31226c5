#!/usr/bin/env bash
# The main job end to end on this machine: build, then run the example
# package under the strongest sandbox this device can give, and show what
# was applied. Installs what is missing (apt-get) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/test-setup.sh >/dev/null
scripts/build.sh build >/dev/null
work=$(mktemp -d /tmp/cordon-demo-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

echo "== what this device can give (cordon-agent status --json)"
build/cordon-agent --config "$work/agent" status --json | python3 -c '
import json,sys; s=json.load(sys.stdin)
print("best level:", s["best_level"], "| reason:", s["downgrade_reason"],
      "| bwrap:", s["probes"]["bwrap"]["version"], "| job user:", s["probes"]["job_user"]["name"])'

echo "== the plan for examples/hello (cordon-agent explain)"
build/cordon-agent --config "$work/agent" explain examples/hello | python3 -c '
import json,sys; p=json.load(sys.stdin)
print("level:", p["level"], "| mechanism:", p["mechanism"], "| seccomp rules:", len(p["seccomp"]))
print("bwrap argv:", " ".join(p["argv"]))'

if [ -x build/cordon-server ] && build/cordon-server 2>&1 | grep -q pack; then
  echo "== sign it (cordon-server init + pack) and run the signed package"
  build/cordon-server init --state "$work/state" >/dev/null
  build/cordon-server pack examples/hello -o "$work/hello.cpkg" --state "$work/state"
  build/cordon-agent --config "$work/agent" exec "$work/hello.cpkg" --trust "$work/state/publisher.pub" -- world
else
  echo "== run it (cordon-agent exec examples/hello -- world)"
  build/cordon-agent --config "$work/agent" exec examples/hello -- world
fi
