#!/usr/bin/env bash
# The GPU run of the write-ahead log in one command, on the GPU
# machine, from the checkout (a few minutes, build included; the steps'
# timeouts add up to 480 s):
#
#   source .deps/unpack-deps.sh; scripts/gpu-durability-log.sh
#
# Builds (Release, sm_90) the GPU log test, the key-value example and
# warpstore-bench; runs the GPU log tests (device appends of many warps,
# recovery undoing GPU transactions, the key-value crash workload on the GPU
# library; host and memory controllers), the key-value example (SET/GET
# batches, then a batch cut short after its data flush and undone on
# reopen), and the log append benchmark (per-warp regions vs one global
# lock), which merges log.append.vs_global_lock into
# bench/results/durability.json. Every step is bounded by `timeout` and
# independent of the others; logs and results go to $OUT.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-durability-log
machine_log
gpu_build 4 gpu_log_test warpstore-kv warpstore-bench

step "GPU log tests"
timeout 90 "$build/tests/gpu/gpu_log_test" >"$out/gpu-log-tests.log" 2>&1 ||
  fail "gpu_log_test (exit $?)"
grep -E "^\[ +(OK|PASSED|FAILED) " "$out/gpu-log-tests.log" | tee -a "$out/summary.log" >&2

step "key-value example (host controller)"
WARPSTORE_CONTROLLER=host WARPSTORE_DIRECT=off timeout 60 "$build/apps/warpstore-kv" \
  --buckets 65536 --batches 20 --batch-keys 8192 >"$out/kv-host.log" 2>&1 ||
  fail "warpstore-kv, host controller (exit $?)"
tail -6 "$out/kv-host.log" | tee -a "$out/summary.log" >&2

step "key-value example (memory controller)"
WARPSTORE_CONTROLLER=memory timeout 60 "$build/apps/warpstore-kv" \
  --buckets 65536 --batches 20 --batch-keys 8192 >"$out/kv-memory.log" 2>&1 ||
  fail "warpstore-kv, memory controller (exit $?)"
tail -6 "$out/kv-memory.log" | tee -a "$out/summary.log" >&2

step "log append: per-warp regions vs global lock (host controller)"
json="$root/bench/results/durability.json"
timeout 90 "$build/bench/warpstore-bench" log --json "$json" --entries 1M --txn-entries 32 \
  --entry-bytes 64 --warps 2048 --controller host --service-threads 8 --direct off \
  --name log.append.vs_global_lock >"$out/bench-log.log" 2>&1 ||
  fail "warpstore-bench log (exit $?)"
tail -8 "$out/bench-log.log" | tee -a "$out/summary.log" >&2

step "log append, each warp flushing every 8 transactions (host controller)"
timeout 90 "$build/bench/warpstore-bench" log --json "$json" --entries 1M --txn-entries 32 \
  --entry-bytes 64 --warps 2048 --flush-every 8 --controller host --service-threads 8 \
  --direct off --name log.append.flush8.vs_global_lock >"$out/bench-log-flush8.log" 2>&1 ||
  fail "warpstore-bench log --flush-every 8 (exit $?)"
tail -8 "$out/bench-log-flush8.log" | tee -a "$out/summary.log" >&2

cp "$json" "$out/" 2>/dev/null
step "done (status $status)"
exit $status
