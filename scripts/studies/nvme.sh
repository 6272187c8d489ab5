# scripts/gpu.sh nvme: GPU threads driving the software NVMe device
# (controller nvme-model), about 8 minutes with the build.
#
#   tests  the GPU suite, where every read and write test runs against the
#          nvme-model controller beside host and memory (gpu-tests.log);
#   bench  `warpstore-bench nvme` into bench/results/nvme.json: random 4 KiB
#          reads by 256 K GPU threads through the model against the model's
#          capacity fed by a CPU-side driver (3 alternating runs each, the
#          file in the page cache), the same after dropping the file's pages
#          (16 K reads), SQ doorbell writes per command under 1 M threads,
#          and the six injected misbehaviours under 64 K threads;
#   hold   what holding short runs of SQ entries for their doorbell costs
#          or gains (queue.cuh, ring_hold_ns): warpstore-bench built a second
#          time with WARPSTORE_RING_HOLD_NS=0, then `block` random 4 KiB
#          reads (host controller and nvme-model) at 32 to 256 K threads, the
#          two builds alternating (each first in turn), 3 runs each, the
#          best kept; rows
#          queues.ring_hold.<controller>.t<threads> in nvme.json (value: with
#          the hold, ceiling: without).
study_summary="GPU-driven NVMe over the software model: GPU suite, reads vs capacity, doorbells, faults (nvme.json)"
study_steps="tests bench hold"

study_nvme() {
  machine_log
  local tests=(gpu_array_read_test gpu_array_write_test gpu_array_batch_test gpu_checkpoint_test
    gpu_log_test gpu_queue_test)
  if want tests; then
    gpu_build 6 "${tests[@]}" warpstore-bench
    gpu_tests gpu-tests.log "${tests[@]}"
  else
    gpu_build 6 warpstore-bench
  fi
  if want bench; then
    local json=$root/bench/results/nvme.json
    step "nvme bench"
    timed bench-nvme 420 "$build/bench/warpstore-bench" nvme --json "$json" \
      --file /tmp/warpstore-nvme.dat --file-size 4GiB --threads 256K --repeat 3 \
      --disk-requests 16K --doorbell-threads 1M --fault-threads 64K --fault-timeout 2
    cp "$json" "$out/" 2>/dev/null
  fi
  if want hold; then
    local json=$root/bench/results/nvme.json nohold=$root/build-gpu-nohold
    step "build without the doorbell hold"
    if ! { timeout 60 cmake -S "$root" -B "$nohold" -G Ninja -DCMAKE_BUILD_TYPE=Release \
             -DCMAKE_CUDA_ARCHITECTURES=90 -DWARPSTORE_WERROR=OFF \
             "-DCMAKE_CUDA_FLAGS=-DWARPSTORE_RING_HOLD_NS=0" "-DCMAKE_CXX_FLAGS=-DWARPSTORE_RING_HOLD_NS=0" &&
           timeout 360 cmake --build "$nohold" -j "$(nproc)" --target warpstore-bench; } >>"$out/build.log" 2>&1; then
      fail "build without the hold"
      return
    fi
    step "block reads with and without the hold"
    local c t r b
    rm -f /tmp/hold-*.json
    for c in host nvme-model; do
      for t in 32 1K 32K 256K; do
        for r in 1 2 3; do
          # Either build first in turn: the first run of a pair reads the
          # file's pages cold in the CPU caches, the second warm.
          local order="hold nohold"
          [ $((r % 2)) = 0 ] && order="nohold hold"
          for b in $order; do
            local bin=$build/bench/warpstore-bench
            [ $b = nohold ] && bin=$nohold/bench/warpstore-bench
            timed "hold-$c-$t-$b-$r" 60 "$bin" block --json "/tmp/hold-$b.json" \
              --file /tmp/warpstore-nvme.dat --file-size 4GiB --controller "$c" --threads "$t" \
              --requests-per-thread 8 --no-ceiling --name "hold.$c.t$t.r$r"
          done
        done
      done
    done
    ${PYTHON:-python3} "$root/scripts/lib/merge_hold.py" /tmp/hold-hold.json /tmp/hold-nohold.json \
      "$json" "${WARPSTORE_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null)}" >>"$out/summary.log" 2>&1 ||
      fail "merge_hold.py"
    cp "$json" "$out/" 2>/dev/null
  fi
}
