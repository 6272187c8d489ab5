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
#          and the six injected misbehaviours under 64 K threads.
study_summary="GPU-driven NVMe over the software model: GPU suite, reads vs capacity, doorbells, faults (nvme.json)"
study_steps="tests bench"

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
}
