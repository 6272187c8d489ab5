#!/usr/bin/env bash
# The whole GPU run in one command, on the GPU machine, from the checkout:
#
#   source .deps/unpack-deps.sh; WARPSTORE_COMMIT=<sha> scripts/gpu-run.sh [all|tests|bench]
#
# Builds (Release, sm_90), runs the GPU suite (ctest -L gpu) and the CPU suite,
# the demo, then the core benchmarks (bench/run_core.sh), which rewrite
# bench/results/core.json. Logs and results go to $OUT (default ./gpu-run-out).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}
out=${OUT:-$root/gpu-run-out}
mkdir -p "$out"
build=${BUILD_DIR:-$root/build-gpu}
status=0
export WARPSTORE_COMMIT=${WARPSTORE_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}

{
  nvidia-smi -L
  nproc
  free -g | head -2
  df -h /tmp "$root" | tail -2
} >"$out/machine.log" 2>&1

echo "== build" >&2
if ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
       cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log" >&2
  echo "gpu-run: build failed" >&2
  exit 1
fi

if [ "$what" = all ] || [ "$what" = tests ]; then
  echo "== GPU tests" >&2
  # Run directly (not through ctest) so a slow or stuck test leaves its log.
  for t in "$build"/tests/gpu/gpu_*_test; do
    echo "-- $t" >>"$out/tests.log"
    timeout 150 "$t" >>"$out/tests.log" 2>&1 || { status=1; echo "FAILED: $t (exit $?)" >>"$out/tests.log"; }
  done
  if [ "${CPU_TESTS:-1}" = 1 ]; then
    echo "== CPU tests" >&2
    (cd "$build" && ctest -LE gpu -j 8 --output-on-failure --timeout 240) >>"$out/tests.log" 2>&1 || status=1
  fi
  grep -E "^\[  (PASSED|FAILED) |tests passed|tests failed|FAILED:" "$out/tests.log" >&2
  if [ "${DEMO:-1}" = 1 ]; then
  echo "== demo" >&2
  timeout 120 "$build/apps/warpstore-demo" --file /tmp/warpstore-demo.bin >"$out/demo.log" 2>&1 || status=1
  cat "$out/demo.log" >&2
  fi
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  echo "== benchmarks" >&2
  "$root/bench/run_core.sh" "$build" >"$out/bench.log" 2>&1 || status=1
  grep -E "^(==|  [a-z]|run_core)" "$out/bench.log" | tail -80 >&2
  cp "$root/bench/results/core.json" "$out/" 2>/dev/null
fi
exit $status
