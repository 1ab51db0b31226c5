#!/usr/bin/env bash
# Cross-build the Windows agent (scripts/build-windows.sh), then run under
# Wine: every Windows test program, `cordon-agent.exe status --json`, `exec`
# of a small package, and — when the Linux build's cordon-server exists
# (build/cordon-server, or CORDON_SERVER_BIN) — `exec` of a signed .cpkg,
# the refusal of a tampered one, and the Windows agent pairing with that
# server on loopback and running a dispatched job (and `status --json` of
# that running agent, asked over its named pipe), then the same agent as
# the Windows service (Wine's services.exe): `service install`, `status
# --json`, `start`, a dispatched job, `stop`, `uninstall`; without the
# server, install/status/uninstall only. Fails on any failure.
# Wine runs with WINEDEBUG=-all in a private prefix under the build dir.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CORDON_WIN_BUILD:-$root/build-win}
export CORDON_WIN_BUILD=$build
start=$(date +%s)

exe=$("$root/scripts/build-windows.sh" | tail -n1)
[ -f "$exe" ] || { echo "test-windows: no cordon-agent.exe" >&2; exit 1; }

export WINEPREFIX=$build/wineprefix
export WINEDEBUG=-all
export WINEARCH=win64
export WINEDLLOVERRIDES="mscoree,mshtml="  # no Mono/Gecko installer prompts
wine=$(command -v wine64 || command -v wine)
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  echo "test-windows: creating the Wine prefix $WINEPREFIX" >&2
  "$wine" wineboot --init >/dev/null 2>&1 || true
  # wineserver keeps running after wineboot; wait for the prefix to settle
  wineserver -w 2>/dev/null || true
fi
runw() { timeout 600 "$wine" "$@"; }
# jq-like: print python expression E evaluated on the JSON document d on stdin
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null || echo bad; }
# the Windows service under Wine's services.exe. Wine starts every
# auto-start service whenever its wineserver boots, and ends them all when
# the last ordinary process exits: keep one wineserver for the whole run
# (`wineserver -k` at the end), and leave no service installed behind.
svc() { runw "$exe" --config "Z:$1" service "${@:2}"; }
svc_state() { svc "$1" status --json | tr -d '\r' | jget "d['installed'], d['state']"; }

wineserver -p 2>/dev/null || true
trap 'wineserver -k 2>/dev/null || true' EXIT
fail=0
echo "== Windows tests under Wine"
for t in "$build"/*_test_*_windows.exe; do
  [ -f "$t" ] || continue
  echo "-- $(basename "$t")"
  if ! (cd "$build" && runw "$t"); then
    echo "FAILED: $(basename "$t")" >&2
    fail=1
  fi
done

echo "== cordon-agent.exe status --json"
cfg=$build/wintest-config
rm -rf "$cfg"
mkdir -p "$cfg"
status=$(runw "$exe" --config "Z:$cfg" status --json | tr -d '\r')
echo "$status"
level=$(printf '%s' "$status" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["best_level"], d["downgrade_reason"], d["platform"])' || echo bad)
# Wine has no AppContainer: contained, and the reason says so
if [ "$level" != "contained appcontainer_unavailable windows" ]; then
  echo "FAILED: status reports '$level', expected 'contained appcontainer_unavailable windows'" >&2
  fail=1
fi

echo "== cordon-agent.exe exec of a small package"
pkg=$build/wintest-hello
rm -rf "$pkg"
mkdir -p "$pkg"
cat >"$pkg/manifest.json" <<'JSON'
{
  "name": "hello-windows",
  "version": "1.0.0",
  "platforms": ["windows"],
  "entry": {"windows": ["/Windows/System32/cmd.exe", "/c", "echo", "hello from %PACKAGE%"]},
  "min_sandbox": "contained",
  "timeout_s": 30,
  "limits": {"memory_mb": 128, "processes": 8}
}
JSON
set +e
result=$(runw "$exe" --config "Z:$cfg" exec "Z:$pkg" | tr -d '\r')
rc=$?
set -e
echo "$result"
check=$(printf '%s' "$result" | python3 -c '
import json, sys
d = json.load(sys.stdin)
s = d["sandbox"]
ok = (d["exit_code"] == 0 and d["error"] is None and s["level"] == "contained"
      and s["downgrade_reason"] == "appcontainer_unavailable" and s["mechanism"] == "job"
      and "hello from" in (d["stdout"] or ""))
print("ok" if ok else "bad")' || echo bad)
if [ "$rc" != 0 ] || [ "$check" != ok ]; then
  echo "FAILED: exec exited $rc, result check: $check" >&2
  fail=1
fi

echo "== cordon-agent.exe exec with min_sandbox isolated is refused"
sed -i 's/"min_sandbox": "contained"/"min_sandbox": "isolated"/' "$pkg/manifest.json"
set +e
result=$(runw "$exe" --config "Z:$cfg" exec "Z:$pkg" 2>/dev/null | tr -d '\r')
rc=$?
set -e
code=$(printf '%s' "$result" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["error"]["code"] if d["error"] else None, d["exit_code"])' || echo bad)
if [ "$rc" != 1 ] || [ "$code" != "sandbox_unavailable None" ]; then
  echo "FAILED: isolated exec exited $rc with '$code', expected 1 and sandbox_unavailable" >&2
  fail=1
fi

echo "== cordon-agent.exe service install/status/uninstall (Wine's services.exe), run --service"
svc "$cfg" uninstall >/dev/null 2>&1 || true # a leftover of an interrupted run
set +e
runw "$exe" --config "Z:$cfg" run --service 2>"$build/svc-console.err"
rc=$?
set -e
cat "$build/svc-console.err"
if [ "$rc" != 2 ] || ! grep -q "not started by the Service Control Manager" "$build/svc-console.err"; then
  echo "FAILED: run --service in a console exited $rc, expected 2 and a usage error" >&2
  fail=1
fi
if svc "$cfg" install; then
  st=$(svc "$cfg" status --json | tr -d '\r')
  echo "$st"
  got=$(printf '%s' "$st" | jget "d['manager'], d['installed'], d['state'], d['start'], d['account'], d['command_line'].endswith('--config Z:$cfg run --service'), d['command_line'].startswith('\"')")
  want="scm True stopped auto NT SERVICE\\cordon-agent True True"
  if [ "$got" != "$want" ]; then
    echo "FAILED: service status after install: '$got', expected '$want'" >&2
    fail=1
  fi
else
  echo "FAILED: service install" >&2
  fail=1
fi
if ! svc "$cfg" uninstall || [ "$(svc_state "$cfg")" != "False None" ]; then
  echo "FAILED: service uninstall" >&2
  fail=1
fi

echo "== cordon-agent.exe exec of a signed .cpkg (packed by the Linux cordon-server)"
server=${CORDON_SERVER_BIN:-$root/build/cordon-server}
if [ -x "$server" ]; then
  cp=$build/wintest-cpkg
  rm -rf "$cp"
  mkdir -p "$cp/pkg"
  cat >"$cp/pkg/manifest.json" <<'JSON'
{"name": "hello-cpkg", "version": "1.0.0", "platforms": ["windows"],
 "entry": {"windows": ["/Windows/System32/cmd.exe", "/c", "type", "greeting.txt"]},
 "min_sandbox": "contained", "timeout_s": 30}
JSON
  echo "hello from a signed package" >"$cp/pkg/greeting.txt"
  "$server" --state "$cp/state" init >/dev/null 2>&1
  "$server" --state "$cp/state" pack "$cp/pkg" -o "$cp/hello.cpkg" >/dev/null 2>&1
  set +e
  out=$(runw "$exe" --config "Z:$cp/cfg" exec "Z:$cp/hello.cpkg" --trust "Z:$cp/state/publisher.pub" | tr -d '\r')
  rc=$?
  set -e
  got=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["exit_code"], d["stdout"].strip())' || echo bad)
  if [ "$rc" != 0 ] || [ "$got" != "0 hello from a signed package" ]; then
    echo "FAILED: signed .cpkg exec exited $rc: '$got'" >&2
    fail=1
  fi
  # one flipped bit near the end: refused, nothing runs
  python3 -c "import sys; b=bytearray(open(sys.argv[1],'rb').read()); b[-5]^=1; open(sys.argv[2],'wb').write(b)" \
    "$cp/hello.cpkg" "$cp/bad.cpkg"
  set +e
  out=$(runw "$exe" --config "Z:$cp/cfg" exec "Z:$cp/bad.cpkg" --trust "Z:$cp/state/publisher.pub" 2>/dev/null | tr -d '\r')
  rc=$?
  set -e
  got=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["error"]["code"], d["exit_code"])' || echo bad)
  if [ "$rc" != 1 ] || [ "$got" != "package_corrupt None" ]; then
    echo "FAILED: tampered .cpkg exited $rc: '$got', expected 1 and package_corrupt" >&2
    fail=1
  fi

  echo "== cross-platform: cordon-agent.exe (Wine) pairs with the Linux cordon-server on loopback and runs a dispatched job"
  e2e=$build/wintest-e2e
  rm -rf "$e2e"
  mkdir -p "$e2e"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  "$server" --state "$e2e/state" init >/dev/null 2>&1
  "$server" --state "$e2e/state" user add alice >/dev/null 2>&1
  "$server" --state "$e2e/state" pack "$cp/pkg" -o "$e2e/hello.cpkg" >/dev/null 2>&1
  "$server" --state "$e2e/state" run --listen "127.0.0.1:$port" >"$e2e/server.log" 2>&1 &
  server_pid=$!
  code=""
  for _ in $(seq 50); do
    code=$("$server" --state "$e2e/state" pair-code alice 2>/dev/null | head -n1) && [ -n "$code" ] && break
    sleep 0.2
  done
  agent_pid=""
  dev=""
  e2e_ok=0
  if [ -n "$code" ] &&
     runw "$exe" --config "Z:$e2e/agent" pair --server "127.0.0.1:$port" --code "$code" --name wine-agent \
       >"$e2e/pair.log" 2>&1; then
    timeout 300 "$wine" "$exe" --config "Z:$e2e/agent" run >"$e2e/agent.log" 2>&1 &
    agent_pid=$!
    dev=""
    for _ in $(seq 100); do
      dev=$("$server" --state "$e2e/state" devices --json 2>/dev/null | python3 -c '
import json, sys
for d in json.load(sys.stdin):
    if d["name"] == "wine-agent" and d["online"] and d["platform"] == "windows":
        print(d["id"])' || true)
      [ -n "$dev" ] && break
      sleep 0.2
    done
    if [ -n "$dev" ]; then
      set +e
      out=$(timeout 120 "$server" --state "$e2e/state" dispatch --user alice --device "$dev" "$e2e/hello.cpkg" --wait 2>"$e2e/dispatch.err")
      rc=$?
      set -e
      got=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["exit_code"], d["device_id"] == sys.argv[1], d["sandbox"]["level"], d["stdout"].strip())' "$dev" || echo bad)
      [ "$rc" = 0 ] && [ "$got" = "0 True contained hello from a signed package" ] && e2e_ok=1
      [ "$e2e_ok" = 1 ] || echo "dispatch exited $rc: '$got' $(cat "$e2e/dispatch.err")" >&2
      # status asks the running agent over its named pipe (platform/windows/daemon_windows.c)
      st=$(runw "$exe" --config "Z:$e2e/agent" status --json 2>"$e2e/status.err" | tr -d '\r')
      got=$(printf '%s' "$st" | jget "d['running'], d['connected']")
      if [ "$got" != "True True" ]; then
        echo "status of the running agent: '$got', expected 'True True': $st $(cat "$e2e/status.err")" >&2
        e2e_ok=0
      fi
    else
      echo "the Windows agent never came online" >&2
    fi
  else
    echo "pairing failed: $(cat "$e2e/pair.log" 2>/dev/null)" >&2
  fi
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
  if [ "$e2e_ok" != 1 ]; then
    echo "FAILED: cross-platform pairing and dispatch (logs in $e2e)" >&2
    fail=1
  fi

  echo "== the same agent as the Windows service: start, online, a dispatched job, stop, offline, uninstall"
  online() {
    "$server" --state "$e2e/state" devices --json 2>/dev/null |
      python3 -c 'import json,sys; print([d["online"] for d in json.load(sys.stdin) if d["name"] == "wine-agent"] == [True])' ||
      echo bad
  }
  wait_online() { for _ in $(seq 100); do [ "$(online)" = "$1" ] && return 0; sleep 0.2; done; return 1; }
  svc_ok=0
  svc "$e2e/agent" uninstall >/dev/null 2>&1 || true
  # the console agent must be gone before the service connects as the same device
  if [ -n "$dev" ] && wait_online False && svc "$e2e/agent" install && svc "$e2e/agent" start; then
    s1=$(svc_state "$e2e/agent")
    echo "after start: installed, state = $s1"
    if [ "$s1" = "True running" ] && wait_online True; then
      set +e
      out=$(timeout 120 "$server" --state "$e2e/state" dispatch --user alice --device "$dev" "$e2e/hello.cpkg" --wait 2>"$e2e/svc-dispatch.err")
      rc=$?
      set -e
      got=$(printf '%s' "$out" | jget "d['exit_code'], d['stdout'].strip()")
      echo "job through the service: exit $rc, $got"
      if [ "$rc" = 0 ] && [ "$got" = "0 hello from a signed package" ] &&
         svc "$e2e/agent" stop; then
        s2=$(svc_state "$e2e/agent")
        echo "after stop: installed, state = $s2"
        [ "$s2" = "True stopped" ] && wait_online False &&
          grep -q "stop requested: stopping" "$e2e/agent/service.log" &&
          grep -q "service stopped (exit status 0)" "$e2e/agent/service.log" && svc_ok=1
      fi
    fi
  fi
  if ! svc "$e2e/agent" uninstall || [ "$(svc_state "$e2e/agent")" != "False None" ]; then
    svc_ok=0
  fi
  echo "-- service.log:"
  cat "$e2e/agent/service.log" 2>/dev/null || true
  if [ "$svc_ok" != 1 ]; then
    echo "FAILED: the agent as a Windows service (logs in $e2e)" >&2
    fail=1
  fi
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
else
  echo "skipped: no Linux cordon-server at $server to pack with (scripts/test.sh builds it first)"
fi

wineserver -k 2>/dev/null || true
if [ "$fail" != 0 ]; then
  echo "== Windows tests FAILED ($(( $(date +%s) - start ))s)" >&2
  exit 1
fi
echo "== Windows tests passed in $(( $(date +%s) - start ))s"
