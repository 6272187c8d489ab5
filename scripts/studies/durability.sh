#!/usr/bin/env bash
# The whole durability study (issue 4) on the GPU machine in one command:
#
#   source .deps/unpack-deps.sh; scripts/gpu-durability.sh [all|tests|crash|bench]
#
# Builds every durability target once (Release, sm_90), then:
#   tests  the checkpoint and log GPU tests, PageRank stopped and resumed, the
#          key-value example (scripts/gpu-durability-checkpoint.sh, -log.sh)
#   crash  warpstore-crash-gpu: kill -9 and power-cut trials of the
#          checkpoint and key-value workloads (TRIALS each, default 100;
#          CRASH_JOBS at once, default 8; STATES commits per run, default 12)
#   bench  checkpoint.vs_memcpy_pwrite, log.append.vs_global_lock (inside the
#          two scripts above) and write.vectoradd.vs_tiled (scripts/gpu-writes.sh)
# Results merge into bench/results/durability.json; logs go to $OUT.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-durability
what=${1:-all}
export BUILD_DIR=$build
gpu_build 7 gpu_checkpoint_test gpu_log_test warpstore-pagerank warpstore-kv \
  warpstore-bench warpstore-crash-gpu gpu_array_write_test gpu_array_read_test

if [ "$what" = all ] || [ "$what" = tests ] || [ "$what" = bench ]; then
  step "checkpoints: tests, PageRank, benchmark"
  OUT=$out/checkpoint "$root/scripts/gpu-durability-checkpoint.sh" || status=1
  step "log: tests, key-value store, benchmark"
  OUT=$out/log "$root/scripts/gpu-durability-log.sh" || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  step "write-heavy vector add"
  OUT=$out/writes "$root/scripts/gpu-writes.sh" || status=1
fi
if [ "$what" = all ] || [ "$what" = crash ]; then
  step "crash trials: kill -9 and power cuts, ${TRIALS:-100} each"
  timeout "${CRASH_TIMEOUT:-900}" "$build/tests/crash/warpstore-crash-gpu" \
    --trials "${TRIALS:-100}" --states "${STATES:-12}" --workload "${WORKLOADS:-all}" \
    --mode "${MODES:-all}" --jobs "${CRASH_JOBS:-8}" --json "$root/bench/results/durability.json" \
    >"$out/crash.log" 2>&1 || { status=1; echo "FAILED: warpstore-crash-gpu (exit $?)" | tee -a "$out/summary.log" >&2; }
  grep -v '^  ' "$out/crash.log" | tail -12 | tee -a "$out/summary.log" >&2
fi
cp "$root/bench/results/durability.json" "$out/" 2>/dev/null
step "done (status $status)"
# One archive of every log beside them: the device tool brings back a
# limited number of files from $OUT.
logs=$(mktemp /tmp/gpu-durability-logs.XXXXXX) && tar czf "$logs" -C "$out" . 2>/dev/null &&
  mv "$logs" "$out/logs.tgz"
exit $status
