# scripts/gpu.sh async: the asynchronous batches (array_ref::prefetch / wait
# / release, post_write_back) on the GPU (about 4 minutes, build included).
#
# Runs gpu_array_batch_test (warps posting, waiting and reading overlapping
# spans, double-buffered tiles, errors at the wait, posted write-back; both
# controllers), then the out-of-core matrix products of
# bench/async_kernel_bench.cu, data in the page cache, warpstore sync against
# warpstore async against CPU double buffering:
#   - the chain (the figure, async.kernel.vs_sync): 8 layers of 8192 x 8192
#     float32 (2 GiB, 32 KiB rows), Y_l = alpha * A_l * Y_{l-1} with 2048
#     columns, a grid barrier after each layer (compute about as long as the
#     I/O of a layer); sync and async each by the computing warps and with a
#     loader warp of their own;
#   - independent tiles (tagged tiles): one 2 GiB A of 4 KiB rows, N = 2048
#     and N = 512 (tiles.n512: I/O-heavy).
# Results: $OUT/async.json. ASYNC_DIAG=1 adds a diagnostic run of the chain
# (no rows written): the loader warp gets the next tile ready after the block
# computed this one, not beside it (--loader-after-compute), so the per-tile
# compute phases say what the loader's work costs the computing warps.
study_summary="asynchronous batches: GPU test, matrix products: chain and tiles (async.json)"
study_steps=""

study_async() {
  machine_log
  gpu_build 6 gpu_array_batch_test async-kernel-bench
  gpu_tests gpu-array-batch-test.log gpu_array_batch_test

  local json=$out/async.json a_file=/tmp/warpstore-async-a.f32 l_file=/tmp/warpstore-async-layers.f32
  local bench=$build/bench/async-kernel-bench
  timed bench-async-layers 150 "$bench" --file "$l_file" --layers 8 --k 8192 --n 2048 \
    --cache-bytes 2GiB --trials 3 --json "$json"
  if [[ -n ${ASYNC_DIAG:-} ]]; then
    timed bench-async-layers-diag 120 "$bench" --file "$l_file" --layers 8 --k 8192 --n 2048 \
      --cache-bytes 2GiB --trials 2 --no-cpu --loader-after-compute
  fi
  rm -f "$l_file"
  timed bench-async-tiles 80 "$bench" --file "$a_file" --a-bytes 2GiB --k 1024 --n 2048 \
    --trials 3 --tag tiles --json "$json"
  timed bench-async-tiles-n512 50 "$bench" --file "$a_file" --a-bytes 2GiB --k 1024 --n 512 \
    --trials 3 --tag tiles.n512 --json "$json"
  rm -f "$a_file"
  grep -hE "async\.kernel|cache \(|compute alone|per tile" "$out"/bench-async-*.log >>"$out/summary.log"
  cat "$out/summary.log" >&2
}
