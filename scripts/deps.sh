#!/usr/bin/env bash
# Install everything cordon needs on Debian 12. Idempotent: only calls
# apt-get when a package is missing.
# Usage: scripts/deps.sh [--runtime]
#   --runtime  what building and running the two programs needs (the demo)
#   (default)  that and the test stack (scripts/test.sh)
set -euo pipefail
# building and running cordon-server and cordon-agent
runtime=(build-essential cmake pkg-config
      libsodium-dev libuv1-dev libmsgpack-dev libseccomp-dev libjansson-dev libsqlite3-dev
      libpq-dev # the PostgreSQL backend's header (libpq itself is loaded on first use)
      bubblewrap python3 passwd procps)
# the tests, the sanitizer and fuzz builds, and what they drive
tests=(clang libclang-rt-14-dev libcriterion-dev iproute2 systemd libxml2-utils git
      postgresql-15 # the tests' throwaway cluster (pg-temp.sh)
      faketime # tests/server/test_clock.c: clocks that step
      strace # tests/server/test_cmd_dispatch.c: what a dispatch opens
      qemu-system-x86 busybox-static e2fsprogs) # scripts/test-vm.sh: a second kernel
case "${1:-}" in
  --runtime) pkgs=("${runtime[@]}") ;;
  "") pkgs=("${runtime[@]}" "${tests[@]}") ;;
  *) echo "usage: scripts/deps.sh [--runtime]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: need root to apt-get install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # postgresql-15 for scripts/pg-temp.sh only: no system cluster of its own
  if [[ " ${missing[*]} " == *" postgresql-15 "* ]] && [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
