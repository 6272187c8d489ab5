#!/usr/bin/env bash
# Builds everything (the CPU target always; GPU code too where nvcc exists)
# and runs the tests this machine can run: the CPU suite everywhere, and the
# GPU suite (ctest label `gpu`) when a GPU is present or WARPSTORE_GPU_TESTS=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
source "$root/scripts/deps.sh"
jobs=${JOBS:-$(nproc)}
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
"$WARPSTORE_CMAKE" -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
"$WARPSTORE_CMAKE" --build "$build" -j "$jobs"
labels=(-LE gpu)
if [ "${WARPSTORE_GPU_TESTS:-}" = 1 ] || nvidia-smi -L >/dev/null 2>&1; then labels=(); fi
"$WARPSTORE_CTEST" --test-dir "$build" "${labels[@]}" --output-on-failure -j "$jobs" --timeout 900
