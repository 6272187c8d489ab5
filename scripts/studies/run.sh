# scripts/gpu.sh run [tests] [demo] [bench]: the whole GPU run.
#   tests  every GPU test binary (run directly, not through ctest, so a slow
#          or stuck test leaves its log: tests.log), then the CPU suite
#          (ctest -LE gpu; CPU_TESTS=0 skips it)
#   demo   warpstore-demo on a file in /tmp (DEMO=0 skips it)
#   bench  the core benchmarks (bench/run_core.sh, PART as it reads it),
#          which rewrite bench/results/core.json (copied to $OUT)
# Builds everything first.
study_summary="the GPU and CPU suites, the demo, the core benchmarks (core.json)"
study_steps="tests demo bench"

study_run() {
  machine_log
  gpu_build 20 all
  if want tests; then
    gpu_tests tests.log
    if [ "${CPU_TESTS:-1}" = 1 ]; then
      timed cpu-tests 400 bash -c 'cd "$0" && ctest -LE gpu -j 8 --output-on-failure --timeout 240' "$build"
    fi
  fi
  if want demo && [ "${DEMO:-1}" = 1 ]; then
    timed demo 120 "$build/apps/warpstore-demo" --file /tmp/warpstore-demo.bin
  fi
  if want bench; then
    timed bench 3600 "$root/bench/run_core.sh" "$build"
    grep -E "^(==|  [a-z]|run_core)" "$out/bench.log" | tail -80 >&2
    cp "$root/bench/results/core.json" "$out/" 2>/dev/null
  fi
}
