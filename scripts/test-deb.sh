#!/usr/bin/env bash
# Build the .deb packages (scripts/build-deb.sh: dpkg-buildpackage), check
# them with `lintian --pedantic` (any E: or W: fails) and their -dbgsym
# packages, install them with `apt-get install ./…deb`, run `cordon-agent
# status` and a job, check that the server listens on loopback only until
# the operator chooses an address, purge them, and check that nothing of
# them is left: files, units, state, accounts.
#
# By default this runs in a throwaway copy of this machine: an overlay of /
# in a private mount namespace, entered with pivot_root, so the host's dpkg
# database, /etc/passwd and /usr are never touched (other test suites use
# the cordon-job account here). In that copy the cordon-job account is
# removed first, so the packages create it as on a fresh machine; a second
# round checks that an account that existed before is kept on purge.
# CORDON_DEB_TEST=host installs on this machine for real (CI on a fresh VM).
# Usage: scripts/test-deb.sh [OUTDIR]   (default build-deb/out)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
out=${1:-build-deb/out}
if [ "$(id -u)" -ne 0 ]; then
  echo "test-deb: needs root (apt-get install, a mount namespace)" >&2
  exit 1
fi
fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
debs=$(scripts/build-deb.sh "$out")
out=$(cd "$out" && pwd)
agent_deb=$(ls "$out"/cordon-agent_*.deb)
server_deb=$(ls "$out"/cordon-server_*.deb)
echo "== built in $(( $(date +%s) - start ))s:" $debs # one a line, joined

echo "== lintian --pedantic"
if ! command -v lintian >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null
fi
# lintian warns when run as root; it only reads the files
lint=$(lintian --pedantic -I -E "$agent_deb" "$server_deb" 2>&1 |
       grep -v '^running with root privileges' || true)
[ -z "$lint" ] || printf '%s\n' "$lint" | sed 's/^/   /'
if printf '%s\n' "$lint" | grep '^[EW]: ' >/dev/null; then
  fail "lintian reports errors or warnings (above)"
fi
echo "   no errors, no warnings"

echo "== -dbgsym packages hold the debug info of the shipped binaries"
for p in cordon-agent cordon-server; do
  deb=$(ls "$out/${p}"_*.deb) dbg=$(ls "$out/${p}-dbgsym"_*.deb 2>/dev/null) || fail "no ${p}-dbgsym package"
  x=$(mktemp -d)
  dpkg-deb -x "$deb" "$x/pkg"
  dpkg-deb -x "$dbg" "$x/dbg"
  id=$(readelf -n "$x/pkg/usr/bin/$p" | sed -n 's/^ *Build ID: //p')
  [ -n "$id" ] || fail "$p has no build id"
  f=$x/dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  [ -f "$f" ] || fail "${p}-dbgsym has no $f"
  readelf -S "$f" 2>/dev/null | grep '\.debug_info' >/dev/null || fail "$f has no .debug_info"
  ! readelf -S "$x/pkg/usr/bin/$p" | grep '\.debug_info' >/dev/null || fail "$p is not stripped"
  echo "   $p: stripped, build id $id in ${p}-dbgsym"
  rm -rf "$x"
done

echo "== man pages"
pages=$(ls docs/man/*.scd 2>/dev/null || true)
if [ -z "$pages" ]; then
  echo "   none: docs/man/*.scd is not there yet"
else
  for scd in $pages; do
    page=$(basename "$scd" .scd)            # cordon-agent.8
    sec=${page##*.}
    case $page in cordon-server.*) deb=$server_deb ;; *) deb=$agent_deb ;; esac
    dpkg-deb -c "$deb" | grep " \./usr/share/man/man$sec/$page\.gz\$" >/dev/null ||
      fail "$(basename "$deb") has no /usr/share/man/man$sec/$page.gz"
    echo "   $page.gz in $(basename "$deb")"
  done
fi

# The checks, run inside the copy (or on the host). $1: the .deb dir.
inner=$(cat <<'EOF'
set -euo pipefail
debs=$1; mode=$2
export DEBIAN_FRONTEND=noninteractive
fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
agent=$(ls "$debs"/cordon-agent_*.deb); server=$(ls "$debs"/cordon-server_*.deb)
files_of() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's#^\./#/#' | grep -v '/$'; }

round() { # $1: fresh (no cordon-job before) or kept (cordon-job exists before)
  local kind=$1
  echo "== round: $kind account"
  if [ "$kind" = fresh ]; then
    if getent passwd cordon-job >/dev/null; then userdel cordon-job; fi
    if getent group cordon-job >/dev/null; then groupdel cordon-job; fi
    rm -rf /var/lib/cordon-job
  else
    getent passwd cordon-job >/dev/null || useradd --system --user-group --home-dir /var/lib/cordon-job \
      --create-home --shell /usr/sbin/nologin cordon-job
  fi
  touch /var/tmp/round.mark
  sleep 1 # find -newer has one-second granularity on some file systems
  apt-get install -y -qq --no-install-recommends "$agent" "$server" >/dev/null 2>/tmp/apt.err \
    || { cat /tmp/apt.err >&2; fail "apt-get install"; }
  dpkg-query -W -f='${Status}\n' cordon-agent | grep -q "install ok installed" || fail "agent not installed"
  dpkg-query -W -f='${Status}\n' cordon-server | grep -q "install ok installed" || fail "server not installed"
  getent passwd cordon-job >/dev/null || fail "no cordon-job account"
  getent passwd cordon-server >/dev/null || fail "no cordon-server account"
  [ "$(stat -c %a /var/lib/cordon-agent)" = 711 ] || fail "/var/lib/cordon-agent mode"
  [ "$(stat -c '%U %a' /var/lib/cordon-server)" = "cordon-server 700" ] || fail "/var/lib/cordon-server owner/mode"
  [ -e /var/lib/cordon-server/cordon.db ] || fail "cordon-server init did not run"
  [ -f /lib/systemd/system/cordon-agent.service ] || fail "agent unit"
  [ -f /usr/lib/systemd/user/cordon-agent.service ] || fail "agent user unit"
  [ -L /etc/systemd/system/multi-user.target.wants/cordon-server.service ] || fail "server unit not enabled"
  [ ! -e /etc/systemd/system/multi-user.target.wants/cordon-agent.service ] || fail "agent enabled before pairing"
  echo "-- cordon-server listens where the unit says: loopback until the operator chooses"
  # what the unit's ExecStart gets: Environment=, then EnvironmentFile= over it
  listen=$(sed -n 's/^Environment=CORDON_SERVER_LISTEN=//p' /lib/systemd/system/cordon-server.service)
  [ "$listen" = 127.0.0.1:7443 ] || fail "the unit's default address is $listen"
  grep -q '^EnvironmentFile=-/etc/default/cordon-server$' /lib/systemd/system/cordon-server.service ||
    fail "the unit does not read /etc/default/cordon-server"
  listen=$(. /etc/default/cordon-server && echo "$CORDON_SERVER_LISTEN")
  [ "$listen" = 127.0.0.1:7443 ] || fail "/etc/default/cordon-server listens on $listen"
  # run the unit's command as its user (setpriv execs it: $! is the server), in a network namespace of its own
  # (port 7443 of this machine may be in use), and read its sockets
  unshare --net sh -c '
    ip link set lo up 2>/dev/null || true
    setpriv --reuid=cordon-server --regid=cordon-server --clear-groups \
      /usr/bin/cordon-server --state /var/lib/cordon-server run --listen "$1" 2>/tmp/srv.err &
    pid=$!
    for i in $(seq 50); do grep -q ":1D13 00000000:0000 0A" /proc/net/tcp && break; sleep 0.1; done
    cat /proc/net/tcp >/tmp/tcp.txt
    kill -TERM $pid; wait $pid' sh "$listen" || { cat /tmp/srv.err >&2; fail "cordon-server run"; }
  grep -q " 0100007F:1D13 00000000:0000 0A " /tmp/tcp.txt || { cat /tmp/srv.err /tmp/tcp.txt >&2; fail "no listener on 127.0.0.1:7443"; }
  ! grep -q " 00000000:1D13 00000000:0000 0A " /tmp/tcp.txt || fail "a listener on 0.0.0.0:7443"
  echo "   127.0.0.1:7443 only; nothing on 0.0.0.0"
  echo "-- cordon-agent status --json"
  cordon-agent status --json >/tmp/status.json || fail "cordon-agent status exited $?"
  python3 - /tmp/status.json <<'PY' || fail "status JSON"
import json,sys
s=json.load(open(sys.argv[1]))
assert s["platform"]=="linux", s
assert s["best_level"] in ("isolated","contained"), s
assert s["config_dir"]=="/var/lib/cordon-agent", s
print("   best_level=%s downgrade_reason=%s job_user=%s" % (s["best_level"], s["downgrade_reason"],
      s["probes"]["job_user"]["name"]))
PY
  echo "-- a job as cordon-job (any level is accepted for this run)"
  cfg=$(mktemp -d)
  echo '{"lowest_level":"none"}' >"$cfg/config.json"
  pkg=$(mktemp -d)
  cp -r /usr/share/doc/cordon-agent/examples/hello/. "$pkg/"
  sed -i 's/"min_sandbox": *"[a-z]*"/"min_sandbox": "none"/' "$pkg/manifest.json"
  grep -q min_sandbox "$pkg/manifest.json" || sed -i 's/^{/{"min_sandbox":"none",/' "$pkg/manifest.json"
  chmod 755 "$pkg"
  cordon-agent --config "$cfg" exec "$pkg" >/tmp/job.json 2>/tmp/job.err || { cat /tmp/job.err /tmp/job.json >&2; fail "exec"; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["exit_code"]==0 and r["error"] is None, r; print("   exit_code=0 level=%s mechanism=%s" % (r["sandbox"]["level"], r["sandbox"]["mechanism"]))' /tmp/job.json \
    || fail "job result"
  rm -rf "$cfg" "$pkg"
  echo "-- cordon-agent service install/uninstall (no systemd running: files only)"
  if cordon-agent service print >/dev/null 2>&1; then
    cordon-agent service install 2>/dev/null || fail "service install"
    cmp -s /etc/systemd/system/cordon-agent.service /lib/systemd/system/cordon-agent.service \
      || fail "service install wrote another unit than the package ships"
    cordon-agent service status --json | grep -q '"installed": true' || fail "service status"
    cordon-agent service uninstall 2>/dev/null || fail "service uninstall"
    [ ! -e /etc/systemd/system/cordon-agent.service ] || fail "service uninstall left the unit"
    echo "   install wrote the shipped unit; uninstall removed it"
  else
    echo "   skipped: this cordon-agent has no service command yet"
  fi

  echo "-- purge"
  apt-get purge -y -qq cordon-agent cordon-server >/dev/null 2>/tmp/apt.err || { cat /tmp/apt.err >&2; fail "apt-get purge"; }
  if dpkg-query -W cordon-agent cordon-server >/dev/null 2>&1 && \
     dpkg-query -W -f='${Status}\n' cordon-agent cordon-server 2>/dev/null | grep -qv "not-installed"; then
    fail "packages still known to dpkg: $(dpkg-query -W -f='${Package} ${Status}\n' 'cordon-*')"
  fi
  for f in $(files_of "$agent") $(files_of "$server"); do
    [ ! -e "$f" ] || fail "left behind: $f"
  done
  for p in /var/lib/cordon-agent /var/lib/cordon-server /etc/default/cordon-server \
           /etc/systemd/system/multi-user.target.wants/cordon-server.service \
           /etc/systemd/system/cordon-server.service /etc/systemd/system/cordon-agent.service \
           /var/lib/systemd/deb-systemd-helper-enabled/cordon-server.service.dsh-also \
           /var/lib/systemd/deb-systemd-helper-masked/cordon-server.service; do
    [ ! -e "$p" ] && [ ! -L "$p" ] || fail "left behind: $p"
  done
  ! getent passwd cordon-server >/dev/null || fail "cordon-server account left"
  ! getent group cordon-server >/dev/null || fail "cordon-server group left"
  if [ "$kind" = fresh ]; then
    ! getent passwd cordon-job >/dev/null || fail "cordon-job account left (the package made it)"
    [ ! -e /var/lib/cordon-job ] || fail "/var/lib/cordon-job left"
  else
    getent passwd cordon-job >/dev/null || fail "a cordon-job account that existed before was removed"
  fi
  # in the copy, look only at what changed in it (the overlay's upper
  # layer, without deletion marks): other work on this machine shows
  # through the lower layer and is not ours
  base=/
  if [ "$mode" = overlay ]; then base=/tmp/upper; fi
  b=${base%/}
  left=$(find "$base" -xdev \( -path "$b/proc" -o -path "$b/sys" -o -path "$b/dev" -o -path "$b/tmp" \
         -o -path "$b/run" -o -path "$b/work" -o -path "$b/root" -o -path "$b/home" -o -path "$b/var/log" \
         -o -path "$b/var/tmp" \) -prune -o \
         -name '*cordon*' ! -type c -newer /var/tmp/round.mark -print 2>/dev/null || true)
  [ -z "$left" ] || fail "files named *cordon* left: $left"
  rm -f /var/tmp/round.mark
  echo "   nothing left"
}
round fresh
round kept
EOF
)

if [ "${CORDON_DEB_TEST:-overlay}" = host ]; then
  bash -c "$inner" inner "$out" host
else
  tmp=$(mktemp -d /tmp/cordon-deb-XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/upper" "$tmp/work" "$tmp/root"
  printf '%s\n' "$inner" >"$tmp/inner.sh"
  # a private mount namespace: the overlay and its binds vanish with it.
  # pivot_root, not chroot: the kernel refuses user namespaces (bwrap) to a
  # chrooted process.
  unshare --mount --propagation private bash -euo pipefail -c '
    t=$1; debs=$2
    mount -t overlay overlay -o "lowerdir=/,upperdir=$t/upper,workdir=$t/work" "$t/root"
    for d in dev proc sys run; do mount --rbind "/$d" "$t/root/$d"; done
    mount -t tmpfs tmpfs "$t/root/tmp"
    mkdir -p "$t/root/tmp/debs" "$t/root/tmp/bin" "$t/root/tmp/oldroot" "$t/root/tmp/upper"
    mount --bind "$t/upper" "$t/root/tmp/upper"
    cp "$debs"/*.deb "$t/root/tmp/debs/"
    cp "$t/inner.sh" "$t/root/tmp/bin/inner.sh"
    cd "$t/root"
    pivot_root . tmp/oldroot
    umount -l /tmp/oldroot
    exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      bash /tmp/bin/inner.sh /tmp/debs overlay
  ' outer "$tmp" "$out"
fi
echo "== .deb install/remove test passed in $(( $(date +%s) - start ))s"
