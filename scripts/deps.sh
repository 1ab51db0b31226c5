#!/usr/bin/env bash
# Install everything cordon needs to build and test on Debian 12.
# Idempotent: only calls apt-get when a package is missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libsodium-dev libuv1-dev libmsgpack-dev libseccomp-dev libcriterion-dev
      libjansson-dev libsqlite3-dev bubblewrap python3 passwd procps iproute2
      systemd libxml2-utils git
      libpq-dev postgresql-15 # the PostgreSQL backend; the tests' throwaway cluster (pg-temp.sh)
      faketime # tests/server/test_clock.c: a daemon whose clock steps
      strace # tests/server/test_cmd_dispatch.c: what a dispatch opens
      qemu-system-x86 busybox-static e2fsprogs) # scripts/test-vm.sh: a second kernel
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
