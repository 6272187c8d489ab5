# scripts/gpu.sh async: the asynchronous batches (array_ref::prefetch / wait
# / release, post_write_back) on the GPU (about 3 minutes, build included).
#
# Runs gpu_array_batch_test (warps posting, waiting and reading overlapping
# spans, double-buffered tiles, errors at the wait, posted write-back; both
# controllers), then the tiled out-of-core matrix product over a 2 GiB A
# file it makes in /tmp (page cache): warpstore sync against warpstore async
# against CPU double buffering, N = 2048 (the figure, async.kernel.vs_sync:
# compute comparable to the I/O of A) and N = 512 (I/O-heavy, tagged n512).
# Results: $OUT/async.json.
study_summary="asynchronous batches: GPU test, tiled matrix product (async.json)"
study_steps=""

study_async() {
  machine_log
  gpu_build 6 gpu_array_batch_test async-kernel-bench
  gpu_tests gpu-array-batch-test.log gpu_array_batch_test

  local json=$out/async.json a_file=/tmp/warpstore-async-a.f32
  timed bench-async-n2048 80 "$build/bench/async-kernel-bench" --file "$a_file" --a-bytes 2GiB \
    --k 1024 --n 2048 --trials 3 --json "$json"
  grep -E "async\.kernel|cache \(|compute alone" "$out/bench-async-n2048.log" >>"$out/summary.log"
  timed bench-async-n512 50 "$build/bench/async-kernel-bench" --file "$a_file" --a-bytes 2GiB \
    --k 1024 --n 512 --trials 3 --tag n512 --json "$json"
  grep -E "async\.kernel|cache \(|compute alone" "$out/bench-async-n512.log" >>"$out/summary.log"
  rm -f "$a_file"
  cat "$out/summary.log" >&2
}
