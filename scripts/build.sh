#!/usr/bin/env bash
# Build cordon into build/ (or $1) with warnings as errors (-DCORDON_WERROR=ON:
# development and CI; a distribution's build leaves it OFF). Extra args go to
# cmake and come after the defaults, so they win.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
