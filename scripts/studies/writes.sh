#!/usr/bin/env bash
# The GPU run of the write path (issue 4) in one command, on the GPU machine,
# from the checkout (about 6 minutes, build included; the steps'
# timeouts add up to about 25 minutes, for a stuck step):
#
#   source .deps/unpack-deps.sh; scripts/gpu-writes.sh
#
# Builds (Release, sm_90) the GPU tests and warpstore-bench, runs the whole
# GPU suite (among it the write tests: 1 M threads storing through a cache
# 1/16 of the data, both controllers, both deliveries, file verified), and
# the write-heavy vector add against the tiled baseline (host controller as
# configured by default, 11 alternating trials each side; 11 with 8 service
# threads per controller; 7 over an output whose blocks exist (--overwrite);
# then, 3 trials each, without its write-behind, without eager
# write-back, without overlapped eviction, without both of those, then the
# memory controller),
# which merges write.vectoradd.vs_tiled into
# bench/results/durability.json. Every step is bounded by `timeout` and
# independent of the others; logs and results go to $OUT.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-writes
machine_log
gpu_build 4 gpu_array_write_test gpu_array_read_test gpu_checkpoint_test gpu_log_test gpu_queue_test \
  warpstore-bench

step "GPU suite (every gpu_*_test binary: the binaries behind ctest -L gpu)"
for t in "$build"/tests/gpu/gpu_*_test; do
  echo "-- $t" >>"$out/gpu-tests.log"
  timeout 150 "$t" >>"$out/gpu-tests.log" 2>&1 || fail "$(basename "$t") (exit $?)"
done
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/gpu-tests.log" | tee -a "$out/summary.log" >&2

json="$root/bench/results/durability.json"
# vector_add TITLE LOG NAME CONTROLLER TRIALS THREADS [WORD...]: one
# vector-add result (vector_add_run), THREADS service threads per host
# controller. The input and the output
# array each have a host controller, with the library's default of 4
# service threads: with the write thread and the write-behind
# thread that is 10 busy threads on the 16 cores. (With 8 each, 18 threads
# fight over 16 cores, the write thread, which bounds the kernel, among
# them: 0.977 against 1.224 with 4, 11 trials each, same lease, 2026-11-25.)
vector_add() {
  local title=$1 log=$2 name=$3 controller=$4 trials=$5 threads=$6
  shift 6
  step "vector add vs tiled ($title)"
  vector_add_run "$json" "$name" "$controller" "$trials" "$threads" "$log" "$@" ||
    fail "warpstore-bench writes, $title (exit $?)"
  tail -6 "$out/$log" | tee -a "$out/summary.log" >&2
}
vector_add "host controller" bench-writes.log write.vectoradd.vs_tiled host 11 4
vector_add "host controller, 8 service threads each" bench-writes-threads8.log \
  write.vectoradd.threads8.vs_tiled host 11 8
vector_add "host controller, output overwritten" bench-writes-overwrite.log \
  write.vectoradd.overwrite.vs_tiled host 7 4 --overwrite
vector_add "host controller, no write-behind" bench-writes-no-write-behind.log \
  write.vectoradd.no_write_behind.vs_tiled host 3 4 WARPSTORE_WRITE_BEHIND_BYTES=0
vector_add "host controller, no eager write-back" bench-writes-no-eager.log \
  write.vectoradd.no_eager_write_back.vs_tiled host 3 4 WARPSTORE_EAGER_WRITE_BACK=0
vector_add "host controller, no overlapped eviction" bench-writes-no-overlap.log \
  write.vectoradd.no_overlapped_eviction.vs_tiled host 3 4 WARPSTORE_OVERLAPPED_EVICTION=0
vector_add "host controller, no eager write-back, no overlapped eviction" bench-writes-no-eager-no-overlap.log \
  write.vectoradd.no_eager_no_overlap.vs_tiled host 3 4 WARPSTORE_EAGER_WRITE_BACK=0 WARPSTORE_OVERLAPPED_EVICTION=0
vector_add "memory controller" bench-writes-memory.log write.vectoradd.memory.vs_tiled memory 3 4

cp "$json" "$out/" 2>/dev/null
rm -f /tmp/warpstore-writes.dat.out
step "done (status $status)"
exit $status
