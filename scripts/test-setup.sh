#!/usr/bin/env bash
# Accounts the sandbox tests need: the job user that a root agent runs jobs
# as, and an unprivileged user to run the agent itself as.
# Usage: scripts/test-setup.sh [--job-user]   (--job-user: the first only,
# what a root agent needs; the demo makes no login account)
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "test-setup: not root; skipping account creation" >&2
  exit 0
fi
id cordon-job >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/cordon-job \
  --shell /usr/sbin/nologin cordon-job
[ "${1:-}" = --job-user ] && exit 0
id cordon-test >/dev/null 2>&1 || useradd --create-home --shell /bin/sh cordon-test
