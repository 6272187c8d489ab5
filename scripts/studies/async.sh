#!/usr/bin/env bash
# The GPU run of the asynchronous batches (array_ref::prefetch / wait /
# release, post_write_back) in one command, on the GPU machine, from the
# checkout (about 3 minutes, build included):
#
#   source .deps/unpack-deps.sh; scripts/gpu-async.sh
#
# Builds (Release, sm_90) gpu_array_batch_test and async-kernel-bench, runs
# the test (warps posting, waiting and reading overlapping spans, double-
# buffered tiles, errors at the wait, posted write-back; both controllers),
# then the tiled out-of-core matrix product over a 2 GiB A file it makes in
# /tmp (page cache): warpstore sync against warpstore async against CPU
# double buffering, N = 2048 (the figure, async.kernel.vs_sync: compute
# comparable to the I/O of A) and N = 512 (I/O-heavy, tagged n512). Logs,
# summary.log and async.json go to $OUT (default <root>/gpu-async-out).
# Every step is bounded by `timeout`.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-async
machine_log
gpu_build 3 gpu_array_batch_test async-kernel-bench

timed gpu-array-batch-test 60 "$build/tests/gpu/gpu_array_batch_test"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/gpu-array-batch-test.log" |
  tee -a "$out/summary.log" >&2

json="$out/async.json"
a_file=/tmp/warpstore-async-a.f32
timed bench-async-n2048 80 "$build/bench/async-kernel-bench" --file "$a_file" --a-bytes 2GiB \
  --k 1024 --n 2048 --trials 3 --json "$json"
grep -E "async\.kernel|cache \(|compute alone" "$out/bench-async-n2048.log" >>"$out/summary.log"
timed bench-async-n512 50 "$build/bench/async-kernel-bench" --file "$a_file" --a-bytes 2GiB \
  --k 1024 --n 512 --trials 3 --tag n512 --json "$json"
grep -E "async\.kernel|cache \(|compute alone" "$out/bench-async-n512.log" >>"$out/summary.log"
rm -f "$a_file"

step "done (status $status)"
cat "$out/summary.log" >&2
exit $status
