#!/usr/bin/env bash
# Build and run every test: the normal build, Release builds with gcc and
# clang (built, not run), the ASan+UBSan build, then each fuzz target for a
# bounded time. Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/deps.sh
scripts/test-setup.sh

echo "== layering: includes across forbidden boundaries"
scripts/check-layers.sh

echo "== build (warnings as errors)"
scripts/build.sh build
echo "== tests"
(cd build && ctest --output-on-failure -j1)
echo "== tests on PostgreSQL: the db and server e2e tests again (label pg), on a throwaway PostgreSQL 15"
pgdir=$(mktemp -d /tmp/cordon-pg-XXXXXX)
trap 'scripts/pg-temp.sh stop "$pgdir"' EXIT
pg_url=$(scripts/pg-temp.sh start "$pgdir")
(cd build && CORDON_TEST_PG="$pg_url" ctest --output-on-failure -j1 -L pg)
scripts/pg-temp.sh stop "$pgdir"
trap - EXIT
echo "== a second kernel: the cgroup v2, seccomp (i386 included), bwrap and limits tests on Debian 12's own kernel under QEMU"
t0=$(date +%s)
scripts/test-vm.sh build
echo "   in $(( $(date +%s) - t0 ))s"
echo "== layering: no library calls into its program's main.c"
scripts/check-layers.sh build
echo "== man pages"
scripts/test-man.sh build

echo "== Release builds with warnings as errors: gcc, then clang (the tests are not run again)"
t0=$(date +%s)
CC=gcc scripts/build.sh build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
CC=clang scripts/build.sh build-release-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "   built in $(( $(date +%s) - t0 ))s"

echo "== build (ASan + UBSan)"
scripts/build.sh build-asan -DCORDON_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
echo "== tests under ASan + UBSan"
lsan_supp="$PWD/tests/lsan.supp" # third-party leaks only (libcriterion)
(cd build-asan && LSAN_OPTIONS=suppressions=$lsan_supp ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
   ctest --output-on-failure -j1)

echo "== fuzz targets (bounded)"
scripts/fuzz.sh "${CORDON_FUZZ_SECONDS:-20}"

echo "== the macOS platform layer, built and tested on Linux"
scripts/test-macos-layer.sh build-macos

echo "== the Windows agent: mingw-w64 cross-build, tests under Wine"
scripts/test-windows.sh
echo "== the Windows MSI: install, status, upgrade, uninstall under Wine"
scripts/test-msi.sh

echo "== .deb packages: build, install, status, purge"
scripts/test-deb.sh
echo "== all tests passed in $(( $(date +%s) - start ))s"
