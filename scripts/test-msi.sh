#!/usr/bin/env bash
# Build cordon-agent.msi (scripts/build-msi.sh) and a copy one version
# newer, then, under Wine in a fresh prefix:
#   1. `msiexec /i cordon-agent.msi /qn`: the program is in
#      C:\Program Files\cordon, C:\ProgramData\cordon exists, the service
#      cordon-agent is registered (sc query, its registry key, `service
#      status --json`) and not started, `cordon-agent.exe status` works,
#      the product is registered for uninstall;
#   2. the newer MSI over it: one product left, the service still there;
#   3. `msiexec /x … /qn`: program, service, product and the (empty)
#      config directory are gone;
#   4. install again, put a config file in C:\ProgramData\cordon as an
#      owner would, uninstall: everything but that directory and its file
#      is gone.
# What Wine cannot show (ACLs, virtual accounts, …) is in docs/WINDOWS.md.
# Environment: CORDON_WIN_BUILD (the agent's build dir, default build-win),
# CORDON_MSI_BUILD (default build-msi). Fails on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CORDON_MSI_BUILD:-$root/build-msi}
start=$(date +%s)
fail() { echo "test-msi: FAIL: $*" >&2; exit 1; }

msi=$("$root/scripts/build-msi.sh" "$build" | tail -n1)
exe=${CORDON_AGENT_EXE:-${CORDON_WIN_BUILD:-$root/build-win}/cordon-agent.exe}
[ -f "$msi" ] && [ -f "$exe" ] || fail "no MSI or no cordon-agent.exe"
version=$(msiinfo export "$msi" Property | tr -d '\r' | awk -F'\t' '$1 == "ProductVersion" { print $2 }')
IFS=. read -r v1 v2 v3 <<<"$version"
next=$v1.$v2.$((v3 + 1))
msi_next=$(CORDON_AGENT_EXE=$exe CORDON_MSI_VERSION=$next "$root/scripts/build-msi.sh" "$build/next" 2>/dev/null | tail -n1)
code_of() { msiinfo export "$1" Property | tr -d '\r' | awk -F'\t' '$1 == "ProductCode" { print $2 }'; }
code=$(code_of "$msi") code_next=$(code_of "$msi_next")
echo "== built $(basename "$msi") $version $code and $next $code_next in $(( $(date +%s) - start ))s"

export WINEPREFIX=$build/wineprefix
export WINEDEBUG=-all
export WINEARCH=win64
export WINEDLLOVERRIDES="mscoree,mshtml=" # no Mono/Gecko installer prompts
wine=$(command -v wine64 || command -v wine)
# a machine that never had cordon: a fresh prefix every run
rm -rf "$WINEPREFIX"
"$wine" wineboot --init >/dev/null 2>&1 || true
wineserver -w 2>/dev/null || true
# one wineserver for the whole run: Wine's services.exe starts every
# auto-start service whenever a wineserver boots
wineserver -p 2>/dev/null || true
trap 'wineserver -k 2>/dev/null || true' EXIT
runw() { timeout 300 "$wine" "$@"; }
drive_c=$WINEPREFIX/drive_c
prog="$drive_c/Program Files/cordon"
data="$drive_c/ProgramData/cordon"
agent='C:\Program Files\cordon\cordon-agent.exe'
svc_key='HKLM\System\CurrentControlSet\Services\cordon-agent'
uninst='HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall'
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null || echo bad; }
regval() { # KEY NAME: the value's data, or nothing
  runw reg query "$1" /v "$2" 2>/dev/null | tr -d '\r' |
    awk -v n="$2" '$1 == n { sub(/^[ \t]*[^ \t]+[ \t]+[^ \t]+[ \t]+/, ""); print }'
}
msiexec() { # /i|/x MSI LOG
  local log=$build/$3 rc=0
  runw msiexec "$1" "$(winepath -w "$2")" /qn /l*v "$(winepath -w "$log")" || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$log" | tr -d '\r' >&2
    fail "msiexec $1 $(basename "$2") exited $rc"
  fi
}

installed_checks() { # PRODUCT-CODE VERSION
  cmp -s "$prog/cordon-agent.exe" "$exe" || fail "C:\\Program Files\\cordon\\cordon-agent.exe is not the built one"
  [ -d "$data" ] || fail "no C:\\ProgramData\\cordon"
  q=$(runw sc query cordon-agent | tr -d '\r') || fail "sc query cordon-agent: not registered"
  grep -q 'WIN32_OWN_PROCESS' <<<"$q" || fail "sc query: $q"
  grep -q 'STOPPED' <<<"$q" || fail "the service was started before pairing: $q"
  [ "$(regval "$svc_key" ImagePath)" = '"C:\Program Files\cordon\cordon-agent.exe" run --service' ] ||
    fail "ImagePath is '$(regval "$svc_key" ImagePath)'"
  [ "$(regval "$svc_key" Start)" = 0x2 ] || fail "Start is not 2 (automatic)"
  [ "$(regval "$svc_key" ObjectName)" = 'NT SERVICE\cordon-agent' ] ||
    fail "ObjectName is '$(regval "$svc_key" ObjectName)'"
  st=$(runw "$agent" service status --json | tr -d '\r')
  [ "$(jget "d['installed'], d['state'], d['start'], d['account']" <<<"$st")" = \
    "True stopped auto NT SERVICE\\cordon-agent" ] || fail "service status: $st"
  s=$(runw "$agent" status --json | tr -d '\r') || fail "cordon-agent.exe status exited $?"
  [ "$(jget "d['platform'], d['config_dir'], d['best_level']" <<<"$s")" = \
    'windows C:\ProgramData\cordon contained' ] || fail "status: $s"
  [ "$(regval "$uninst\\$1" DisplayVersion)" = "$2" ] || fail "product $1 $2 not registered for uninstall"
}

removed_checks() { # PRODUCT-CODE
  [ ! -e "$prog" ] || fail "C:\\Program Files\\cordon left: $(ls -A "$prog")"
  ! runw sc query cordon-agent >/dev/null 2>&1 || fail "the service is still registered"
  ! runw reg query "$svc_key" >/dev/null 2>&1 || fail "the service's registry key is left"
  ! runw reg query "$uninst\\$1" >/dev/null 2>&1 || fail "product $1 still registered"
}

echo "== msiexec /i $(basename "$msi") /qn"
msiexec /i "$msi" install.log
installed_checks "$code" "$version"
echo "   program, config dir, service (auto, stopped, NT SERVICE\\cordon-agent, run --service), status, product: ok"

echo "== upgrade: msiexec /i ($next) /qn"
msiexec /i "$msi_next" upgrade.log
installed_checks "$code_next" "$next"
! runw reg query "$uninst\\$code" >/dev/null 2>&1 || fail "the old product $code is still registered"
echo "   one product ($next), the service still registered: ok"

echo "== msiexec /x /qn"
msiexec /x "$msi_next" remove.log
removed_checks "$code_next"
[ ! -e "$data" ] || fail "the empty C:\\ProgramData\\cordon is left"
echo "   program, service, product and the empty config dir removed: ok"

echo "== install, the owner writes config.json, uninstall: the state is kept"
msiexec /i "$msi" install2.log
installed_checks "$code" "$version"
echo '{"max_jobs": 2}' >"$data/config.json"
msiexec /x "$msi" remove2.log
removed_checks "$code"
[ -f "$data/config.json" ] || fail "C:\\ProgramData\\cordon\\config.json was removed"
echo "   program, service and product removed; C:\\ProgramData\\cordon\\config.json kept: ok"
rm -rf "$data"

echo "== MSI install/upgrade/uninstall test passed in $(( $(date +%s) - start ))s"
