# scripts/gpu.sh durability [checkpoint] [log] [writes] [crash] [tests] [bench]:
# the durability study. Builds every durability target once, then:
#   checkpoint  the GPU checkpoint test (device form from user kernels, both
#               controllers, arrays, fallback past corrupt data); PageRank
#               stopped abruptly mid-run, resumed from its checkpoint and
#               verified bit for bit against the CPU, and in the host form;
#               the checkpoint benchmark (checkpoint.vs_memcpy_pwrite: 4 GiB
#               in 4 buffers vs cudaMemcpy + pwrite + fdatasync)
#   log         the GPU log tests (device appends of many warps, recovery
#               undoing GPU transactions, the key-value crash workload on the
#               GPU library; host and memory controllers); the key-value
#               example on both controllers (SET/GET batches, then a batch cut
#               short after its data flush and undone on reopen); the log
#               append benchmark (log.append.vs_global_lock: per-warp regions
#               vs one global lock; and flushing every 8 transactions)
#   writes      `scripts/gpu.sh writes` (write.vectoradd.vs_tiled)
#   crash       warpstore-crash-gpu: kill -9 and power-cut trials of the
#               checkpoint and key-value workloads (TRIALS each, default 100;
#               CRASH_JOBS at once, default 8; STATES commits per run, default
#               12; WORKLOADS, MODES; CRASH_TIMEOUT, default 900 s)
#   tests       checkpoint and log;  bench  checkpoint, log and writes
# Results merge into bench/results/durability.json (copied to $OUT).
study_summary="checkpoints, log, key-value store, crash trials (durability.json)"
study_steps="checkpoint log writes crash tests bench"
# shellcheck source=scripts/studies/writes.sh
source "$(dirname "${BASH_SOURCE[0]}")/writes.sh"  # study_writes
study_summary="checkpoints, log, key-value store, crash trials (durability.json)"
study_steps="checkpoint log writes crash tests bench"

durability_checkpoint() {
  local json=$root/bench/results/durability.json ckpt=/tmp/warpstore-pagerank.ckpt rc
  gpu_tests gpu-checkpoint-test.log gpu_checkpoint_test

  # Buffered I/O for the host controller: see the O_DIRECT note in
  # tests/crash/checkpoint_workload_test.cpp.
  local WARPSTORE_DIRECT=${WARPSTORE_DIRECT:-off}
  export WARPSTORE_DIRECT
  local pr=(--scale 22 --edge-factor 16 --iterations 30 --every 5 --checkpoint "$ckpt")
  rm -f "$ckpt"
  step "PageRank: stopped abruptly after 12 iterations, then resumed and verified"
  timeout 120 "$build/apps/warpstore-pagerank" "${pr[@]}" --stop-after 12 >"$out/pagerank-first.log" 2>&1
  rc=$?
  [ $rc -eq 3 ] || fail "warpstore-pagerank first run (exit $rc, expected 3: stopped abruptly)"
  timed pagerank-resume 180 "$build/apps/warpstore-pagerank" "${pr[@]}" --verify
  grep -q "resumed from $ckpt: iteration 10" "$out/pagerank-resume.log" ||
    fail "warpstore-pagerank did not resume at iteration 10"
  tail -4 "$out/pagerank-first.log" | tee -a "$out/summary.log" >&2
  grep -E "resumed|verified|VERIFY" "$out/pagerank-resume.log" | tee -a "$out/summary.log" >&2
  timed pagerank-host-form 120 "$build/apps/warpstore-pagerank" "${pr[@]}" --iterations 35 --host-form --verify
  grep -E "resumed|verified|VERIFY" "$out/pagerank-host-form.log" | tee -a "$out/summary.log" >&2
  rm -f "$ckpt"

  timed bench-checkpoint 300 "$build/bench/warpstore-bench" checkpoint --json "$json" --bytes 4GiB \
    --buffers 4 --line-size 64K --controller host --service-threads 8 --direct off --repeat 3
  rm -f /tmp/warpstore-checkpoint.ckpt /tmp/warpstore-checkpoint.pwrite
}

durability_log() {
  local json=$root/bench/results/durability.json
  gpu_tests gpu-log-tests.log gpu_log_test
  timed kv-host 60 env WARPSTORE_CONTROLLER=host WARPSTORE_DIRECT=off "$build/apps/warpstore-kv" \
    --buckets 65536 --batches 20 --batch-keys 8192
  timed kv-memory 60 env WARPSTORE_CONTROLLER=memory "$build/apps/warpstore-kv" \
    --buckets 65536 --batches 20 --batch-keys 8192
  local log_bench=(log --json "$json" --entries 1M --txn-entries 32 --entry-bytes 64 --warps 2048
                   --controller host --service-threads 8 --direct off)
  timed bench-log 90 "$build/bench/warpstore-bench" "${log_bench[@]}" --name log.append.vs_global_lock
  timed bench-log-flush8 90 "$build/bench/warpstore-bench" "${log_bench[@]}" --flush-every 8 \
    --name log.append.flush8.vs_global_lock
}

study_durability() {
  machine_log
  gpu_build 7 gpu_checkpoint_test gpu_log_test warpstore-pagerank warpstore-kv warpstore-bench \
    warpstore-crash-gpu gpu_array_write_test gpu_array_read_test gpu_queue_test
  if want checkpoint || want tests || want bench; then
    step "checkpoints: tests, PageRank, benchmark"
    durability_checkpoint
  fi
  if want log || want tests || want bench; then
    step "log: tests, key-value store, benchmark"
    durability_log
  fi
  if want writes || want bench; then
    step "write-heavy vector add"
    study_writes
  fi
  if want crash; then
    timed crash "${CRASH_TIMEOUT:-900}" "$build/tests/crash/warpstore-crash-gpu" \
      --trials "${TRIALS:-100}" --states "${STATES:-12}" --workload "${WORKLOADS:-all}" \
      --mode "${MODES:-all}" --jobs "${CRASH_JOBS:-8}" --json "$root/bench/results/durability.json"
    grep -v '^  ' "$out/crash.log" | tail -12 | tee -a "$out/summary.log" >&2
  fi
  cp "$root/bench/results/durability.json" "$out/" 2>/dev/null
}
