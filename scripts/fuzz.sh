#!/usr/bin/env bash
# Build the libFuzzer targets with clang and run each for $1 seconds
# (default 20) on its seed corpus in tests/fuzz/corpus/<name>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
CC=clang cmake -S . -B build-fuzz -DCORDON_FUZZ=ON -DCORDON_WERROR=ON -DCORDON_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
targets=()
for src in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  corpus=tests/fuzz/corpus/${name#fuzz_}
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null || true
  echo "-- $name for ${secs}s"
  build-fuzz/"$name" -max_total_time="$secs" -print_final_stats=0 -close_fd_mask=3 "$work" >/dev/null 2>build-fuzz/"$name".log \
    || { tail -n 40 build-fuzz/"$name".log; exit 1; }
  grep -E '^(Done|#[0-9]+.*DONE)' build-fuzz/"$name".log | tail -n 1 || true
  rm -rf "$work"
done
