#!/usr/bin/env bash
# The reliability study on a CPU machine (CI), in one command: the perturbed
# protocol test over many seeds, the submission fuzz loop, the libFuzzer
# target (built with clang, ASan and UBSan in <build>-fuzz), the Spin model,
# the Python hostile inputs (where the package is installed: CI runs
# scripts/test-python.sh first), then warpstore-reliability-cpu (fault kinds,
# hostile inputs, the mixed read/write soak), which merges everything into
# bench/results/reliability.json. Logs go to $OUT (default
# <build>/reliability). SANITIZER_RUNS names sanitizer runs that already came
# back clean (CI runs scripts/sanitize.sh first), for the results file.
#   WARPSTORE_FUZZ_SECONDS       the seeded fuzz loop (default 20)
#   WARPSTORE_LIBFUZZER_SECONDS  the libFuzzer run (default 60; 0: skip it)
#   WARPSTORE_PY_VENV            the Python environment (default .venv)
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
fuzz_seconds=${WARPSTORE_FUZZ_SECONDS:-20}
libfuzzer_seconds=${WARPSTORE_LIBFUZZER_SECONDS:-60}

echo "== perturbed protocol, $seeds seeds per controller"
WARPSTORE_PERTURB_SEEDS=$seeds timeout 900 "$build/tests/cpu/perturbed_protocol_test" 2>&1 |
  tee "$out/perturbed.log"
echo "== submission fuzz, $fuzz_seconds s"
WARPSTORE_FUZZ_SECONDS=$fuzz_seconds timeout $((fuzz_seconds + 120)) \
  "$build/tests/cpu/submission_fuzz_test" 2>&1 | tee "$out/fuzz.log"
fed=$(sed -n 's/^submission fuzz: \([0-9]*\) entries.*/\1/p' "$out/fuzz.log")
execs=0 fuzz_failures=0 corpus_size=0
if [ "$libfuzzer_seconds" -gt 0 ]; then
  echo "== libFuzzer: submission entries and doorbell values, $libfuzzer_seconds s"
  if ! command -v clang++ >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; }
  fi
  command -v clang++ >/dev/null || { echo "reliability: clang++ is needed for the libFuzzer target" >&2; exit 1; }
  fuzz_build=${FUZZ_BUILD_DIR:-$build-fuzz}
  "$WARPSTORE_CMAKE" -S "$root" -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DWARPSTORE_GPU=OFF -DWARPSTORE_FUZZ=ON -DWARPSTORE_TESTS=OFF \
    -DWARPSTORE_WERROR=OFF >/dev/null
  "$WARPSTORE_CMAKE" --build "$fuzz_build" -j "$jobs" --target submission_fuzzer
  # The committed seeds stay as they are; what the run finds goes to $out.
  rm -rf "$out/fuzz-corpus" "$out"/fuzz-crash-* "$out"/fuzz-leak-* "$out"/fuzz-timeout-* "$out"/fuzz-oom-*
  mkdir -p "$out/fuzz-corpus"
  cp "$root"/tests/fuzz/corpus/* "$out/fuzz-corpus/"
  set +e
  ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}" timeout $((libfuzzer_seconds + 120)) \
    "$fuzz_build/tests/fuzz/submission_fuzzer" -max_total_time="$libfuzzer_seconds" \
    -runs=5000000 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/fuzz-" "$out/fuzz-corpus" >"$out/libfuzzer.log" 2>&1
  rc=$?
  set -e
  tail -15 "$out/libfuzzer.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$out/libfuzzer.log" | tail -1)
  corpus_size=$(find "$out/fuzz-corpus" -type f | wc -l)
  fuzz_failures=$(find "$out" -maxdepth 1 -name 'fuzz-*-*' -type f | wc -l)
  if [ "$rc" != 0 ] && [ "$fuzz_failures" = 0 ]; then fuzz_failures=1; fi
  if [ "$rc" != 0 ]; then echo "reliability: libFuzzer failed (exit $rc): see $out/libfuzzer.log" >&2; fi
  # A run that never started still counts as one failure, never as clean.
  if [ -z "$execs" ] || [ "$execs" = 0 ]; then execs=1; fuzz_failures=$((fuzz_failures > 0 ? fuzz_failures : 1)); fi
fi

py=${WARPSTORE_PY_VENV:-$root/.venv}/bin/python
python_cases=
if [ -x "$py" ] && "$py" -c 'import warpstore' 2>/dev/null; then
  echo "== hostile inputs from Python"
  "$py" "$root/scripts/python_hostile.py" "$out/python-hostile.tsv" && python_cases=$out/python-hostile.tsv
else
  echo "== hostile inputs from Python: the package is not installed here (scripts/test-python.sh); not tried"
fi

echo "== Spin model"
"$root/scripts/check-model.sh" 2>&1 | tee "$out/model.log"
states=$(sed -n 's/^model total: \([0-9]*\) states/\1/p' "$out/model.log")
covered=$(sed -n 's/^model \(depth [0-9]*, [0-9]* lanes x [0-9]* commands\).*/\1/p' "$out/model.log" |
  paste -sd ';' -)

echo "== fault kinds, hostile inputs, read/write soak"
timeout 1200 "$build/bench/warpstore-reliability-cpu" \
  --json "${RELIABILITY_JSON:-$root/bench/results/reliability.json}" \
  --model-states "${states:-0}" --model-depths "$covered" --chaos-seeds "$seeds" \
  --fuzz-inputs "${fed:-0}" --fuzz-execs "$execs" --fuzz-failures "$fuzz_failures" \
  --fuzz-seconds "$libfuzzer_seconds" --fuzz-corpus "$corpus_size" --python-cases "$python_cases" \
  --sanitizer-runs "${SANITIZER_RUNS:-}" 2>&1 | tee "$out/study.log"
