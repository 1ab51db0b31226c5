#!/usr/bin/env bash
# Build cordon-agent with the macOS platform layer on this Linux machine
# (-DCORDON_PLATFORM=macos; the Apple-only process table is replaced by
# /proc, see docs/MACOS.md) and run the tests that apply to it: every
# tests/*/test_*_macos.c. The sandbox tests run the agent as root (jobs as
# cordon-job) and as the unprivileged user cordon-test, so this needs root;
# as another user only the tests that start no agent are run.
# Usage: scripts/test-macos-layer.sh [BUILD_DIR]   (default build-macos)
# CORDON_SANITIZE=ON builds with AddressSanitizer + UBSan (use another
# BUILD_DIR, e.g. build-mac-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
dir=${1:-build-macos}
case "$(basename "$dir")" in
  build-mac*) ;;
  *) echo "test-macos-layer: the build dir must be named build-mac*" >&2; exit 2 ;;
esac
scripts/test-setup.sh

echo "== configure and build ($dir, CORDON_PLATFORM=macos)"
extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${CORDON_SANITIZE:-OFF}" = ON ]; then
  extra=(-DCMAKE_BUILD_TYPE=Debug -DCORDON_SANITIZE=ON)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fi
cmake -S . -B "$dir" -DCORDON_PLATFORM=macos -DCORDON_SERVER=OFF -DCORDON_WERROR=ON "${extra[@]}" >/dev/null
targets=(cordon-agent)
for src in tests/*/test_*_macos.c; do
  d=$(basename "$(dirname "$src")")
  targets+=("${d}_$(basename "$src" .c)")
done
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"

echo "== tests of the macOS layer"
regex='_macos$'
if [ "$(id -u)" -ne 0 ]; then
  echo "test-macos-layer: not root: skipping the tests that run the agent as root and as cordon-test" >&2
  regex='(jobtree|service)_macos$'
fi
(cd "$dir" && ctest --output-on-failure -j1 -R "$regex")
echo "== macOS layer tests passed in $(( $(date +%s) - start ))s"
