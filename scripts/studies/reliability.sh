# scripts/gpu.sh reliability [sanitizer] [study]: the reliability study on
# the GPU (about 5 minutes; every step has its own time limit).
#   sanitizer  warpstore-reliability-gpu in a reduced form under
#              compute-sanitizer memcheck, racecheck and synccheck
#   study      in full: the fault kinds and hostile inputs read by kernels,
#              the cache-pressure runs (every slot pinned, hot spot, Zipf,
#              1 M threads), the 100 GB read soak and the mixed read/write
#              soak (soak.readwrite.gpu: 4 K writer warps, 2 GiB through a
#              32 MiB cache, both controllers, 4 KiB and 64 KiB lines, the
#              file compared with the host's model byte for byte after each
#              part); the sanitizer runs that came back clean are recorded
# Results merge into bench/results/reliability.json (entries of the GPU
# carry ".gpu" where the CPU study has the same name; copied to $OUT).
study_summary="faults, hostile inputs, pressure, soaks, compute-sanitizer (reliability.json)"
study_steps="sanitizer study"
tail_lines=30

study_reliability() {
  export WARPSTORE_BENCH_COMMAND=${WARPSTORE_BENCH_COMMAND:-"source .deps/unpack-deps.sh; scripts/gpu.sh reliability"}
  local json=$root/bench/results/reliability.json bin=$build/bench/warpstore-reliability-gpu
  machine_log
  gpu_build 6 warpstore-reliability-gpu

  # compute-sanitizer on a small run: two fault kinds, small soaks, few threads
  # (the read/write soak's cache must hold one set of 16 lines of 64 KiB).
  local small=(--no-json --no-hostile --kinds io_error,stall --reads 2K --file-size 2M
               --cache-bytes 64K --timeout-ms 2000 --soak-bytes 16M --soak-file 128M --soak-cache 4M
               --pressure-threads 0 --rw-file 32M --rw-cache 1M --rw-writers 32 --rw-ops 16 --rw-rounds 1
               --dir /tmp)
  local clean=() tool sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if want sanitizer; then
    for tool in memcheck racecheck synccheck; do
      # A finding is recorded (the run is not named clean), not a failure of the study.
      step "compute-sanitizer $tool"
      if timeout 45 "$sanitizer" --tool "$tool" --error-exitcode 9 "$bin" "${small[@]}" \
           >"$out/sanitizer-$tool.log" 2>&1; then
        clean+=("compute-sanitizer-$tool")
      else
        echo "compute-sanitizer $tool: exit $? (not clean: see sanitizer-$tool.log)" |
          tee -a "$out/summary.log" >&2
        tail -5 "$out/sanitizer-$tool.log" >&2
      fi
    done
  fi
  local runs
  runs=$(IFS=,; echo "${clean[*]:-}")

  if want study; then
    timed study 420 "$bin" --json "$json" --dir /tmp --timeout-ms 2000 --sanitizer-runs "$runs"
    cp "$json" "$out/" 2>/dev/null
  fi
}
