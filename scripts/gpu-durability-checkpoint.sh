#!/usr/bin/env bash
# The GPU run of checkpoints (the GPU test, checkpointed PageRank and the
# checkpoint benchmark) in one command, on
# the GPU machine, from the checkout (about 3 to 5 minutes, build included):
#
#   source .deps/unpack-deps.sh; scripts/gpu-durability-checkpoint.sh
#
# Builds (Release, sm_90) the GPU checkpoint test, warpstore-pagerank and
# warpstore-bench; runs the test (device form from user kernels, both
# controllers, arrays, fallback past corrupt data), PageRank stopped abruptly
# mid-run and resumed from its checkpoint, verified bit for bit against the
# CPU, and the checkpoint benchmark, which merges checkpoint.vs_memcpy_pwrite
# into bench/results/durability.json. Every step is bounded by `timeout` and
# independent of the others; logs and results go to $OUT.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-durability-checkpoint
machine_log
gpu_build 4 gpu_checkpoint_test warpstore-pagerank warpstore-bench \
  warpstore_crash_checkpoint_gpu

step "GPU checkpoint test"
timeout 120 "$build/tests/gpu/gpu_checkpoint_test" >"$out/gpu-checkpoint-test.log" 2>&1 ||
  fail "gpu_checkpoint_test (exit $?)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/gpu-checkpoint-test.log" | tee -a "$out/summary.log" >&2

# Buffered I/O for the host controller: see the O_DIRECT note in
# tests/crash/checkpoint_workload_test.cpp.
export WARPSTORE_DIRECT=${WARPSTORE_DIRECT:-off}

step "PageRank: stopped abruptly after 12 iterations, then resumed and verified"
ckpt=/tmp/warpstore-pagerank.ckpt
pr=(--scale 22 --edge-factor 16 --iterations 30 --every 5 --checkpoint "$ckpt")
rm -f "$ckpt"
timeout 120 "$build/apps/warpstore-pagerank" "${pr[@]}" --stop-after 12 >"$out/pagerank-first.log" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "warpstore-pagerank first run (exit $rc, expected 3: stopped abruptly)"
timeout 180 "$build/apps/warpstore-pagerank" "${pr[@]}" --verify >"$out/pagerank-resume.log" 2>&1 ||
  fail "warpstore-pagerank resumed run (exit $?)"
grep -q "resumed from $ckpt: iteration 10" "$out/pagerank-resume.log" || fail "warpstore-pagerank did not resume at iteration 10"
tail -4 "$out/pagerank-first.log" | tee -a "$out/summary.log" >&2
grep -E "resumed|verified|VERIFY" "$out/pagerank-resume.log" | tee -a "$out/summary.log" >&2
step "PageRank, host form of the checkpoint"
timeout 120 "$build/apps/warpstore-pagerank" "${pr[@]}" --iterations 35 --host-form --verify \
  >"$out/pagerank-host-form.log" 2>&1 || fail "warpstore-pagerank --host-form (exit $?)"
grep -E "resumed|verified|VERIFY" "$out/pagerank-host-form.log" | tee -a "$out/summary.log" >&2
rm -f "$ckpt"

step "checkpoint benchmark: 4 GiB in 4 buffers vs cudaMemcpy + pwrite + fdatasync"
json="$root/bench/results/durability.json"
timeout 300 "$build/bench/warpstore-bench" checkpoint --json "$json" --bytes 4GiB --buffers 4 \
  --line-size 64K --controller host --service-threads 8 --direct off --repeat 3 \
  >"$out/bench-checkpoint.log" 2>&1 || fail "warpstore-bench checkpoint (exit $?)"
tail -14 "$out/bench-checkpoint.log" | tee -a "$out/summary.log" >&2

cp "$json" "$out/" 2>/dev/null
rm -f /tmp/warpstore-checkpoint.ckpt /tmp/warpstore-checkpoint.pwrite
step "done (status $status)"
exit $status
