#!/usr/bin/env bash
# The reliability study on a CPU machine (CI), in one command: the perturbed
# protocol test over many seeds, the submission fuzz loop, the Spin model,
# then warpstore-reliability-cpu (fault kinds, hostile inputs), which merges
# everything into bench/results/reliability.json. Logs go to $OUT (default
# <build>/reliability). SANITIZER_RUNS names sanitizer runs that already came
# back clean (CI runs scripts/sanitize.sh first), for the results file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
source "$root/scripts/deps.sh"
jobs=${JOBS:-$(nproc)}
if [ ! -f "$build/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  "$WARPSTORE_CMAKE" -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DWARPSTORE_GPU=OFF
fi
"$WARPSTORE_CMAKE" --build "$build" -j "$jobs" --target warpstore-reliability-cpu \
  perturbed_protocol_test submission_fuzz_test
export WARPSTORE_BENCH_COMMAND=${WARPSTORE_BENCH_COMMAND:-scripts/reliability.sh}
out=${OUT:-$build/reliability}
mkdir -p "$out"
seeds=${WARPSTORE_PERTURB_SEEDS:-128}
fuzz_seconds=${WARPSTORE_FUZZ_SECONDS:-30}

echo "== perturbed protocol, $seeds seeds per controller"
WARPSTORE_PERTURB_SEEDS=$seeds timeout 900 "$build/tests/cpu/perturbed_protocol_test" 2>&1 |
  tee "$out/perturbed.log"
echo "== submission fuzz, $fuzz_seconds s"
WARPSTORE_FUZZ_SECONDS=$fuzz_seconds timeout $((fuzz_seconds + 120)) \
  "$build/tests/cpu/submission_fuzz_test" 2>&1 | tee "$out/fuzz.log"
fed=$(sed -n 's/^submission fuzz: \([0-9]*\) entries.*/\1/p' "$out/fuzz.log")
echo "== Spin model"
"$root/scripts/check-model.sh" 2>&1 | tee "$out/model.log"
states=$(sed -n 's/^model total: \([0-9]*\) states/\1/p' "$out/model.log")
covered=$(sed -n 's/^model \(depth [0-9]*, [0-9]* lanes x [0-9]* commands\).*/\1/p' "$out/model.log" |
  paste -sd ';' -)

echo "== fault kinds and hostile inputs"
timeout 1200 "$build/bench/warpstore-reliability-cpu" \
  --json "${RELIABILITY_JSON:-$root/bench/results/reliability.json}" \
  --model-states "${states:-0}" --model-depths "$covered" --chaos-seeds "$seeds" \
  --fuzz-inputs "${fed:-0}" --sanitizer-runs "${SANITIZER_RUNS:-}" 2>&1 | tee "$out/study.log"
