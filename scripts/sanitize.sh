#!/usr/bin/env bash
# Builds the CPU target and its tests with a sanitizer and runs the protocol
# tests (cache, arrays, bulk reads, queues against the host controller, block
# I/O, the submission fuzz loop, the perturbed protocol, the fault scenarios
# the software NVMe controller, its driver and the nvme-model controller
# over it) under it.
#   scripts/sanitize.sh thread|address
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-thread}
case "$kind" in
  thread) flags="-fsanitize=thread" ;;
  address) flags="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  *) echo "usage: scripts/sanitize.sh thread|address" >&2; exit 2 ;;
esac
build=${BUILD_DIR:-$root/build-$kind}
source "$root/scripts/deps.sh"
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# GCC refuses standalone fences under TSan with a warning (libcu++ has one):
# warnings stay visible but not fatal here; the normal build keeps -Werror.
"$WARPSTORE_CMAKE" -S "$root" -B "$build" "${generator[@]}" -DWARPSTORE_GPU=OFF -DWARPSTORE_WERROR=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
"$WARPSTORE_CMAKE" --build "$build" -j "${JOBS:-$(nproc)}" >/dev/null
export TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
"$WARPSTORE_CTEST" --test-dir "$build" -R "Cache|Array|BulkRead|HostController|IoEngine|Nvme|block_cpu|SubmissionFuzz|perturbed_protocol|reliability_cpu" --output-on-failure \
  -j "${JOBS:-$(nproc)}" --timeout 900
