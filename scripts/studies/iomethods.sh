# scripts/gpu.sh iomethods: the I/O-methods comparison.
#
# Runs `warpstore-bench iomethods` on an 8 GiB page-cache-resident pattern
# file ($FILE, default /tmp/warpstore-bench.dat): io_uring (the ceiling),
# pread + cudaMemcpy, mmap + cudaMemcpy, unified memory, cuFile, warpstore
# block and array (cold, hot), random 4 KiB and sequential 128 KiB reads,
# with the sweeps, and writes for the methods that can write (io_uring,
# pwrite, mmap, cuFile: warpstore writes are not built yet) into a sparse
# scratch target in /tmp. cuFile runs with a cufile.json that allows
# compatibility mode (no nvidia-fs on that machine); two short extra runs try
# cuFile with no cufile.json and with compatibility mode forced, each
# recorded under its own name (a failure is recorded with its error). The run
# goes in parts (main, uvm, cufile, the two cuFile variants), each a process
# of its own with its own time limit, merging into
# bench/results/iomethods.json (started afresh by the first, copied to
# $OUT). Whole run: at most $BUDGET seconds (default 215).
study_summary="I/O methods: io_uring, pread, mmap, UVM, cuFile, warpstore (iomethods.json)"
study_steps=""
study_budget=215
tail_lines=0  # each part's result lines are shown instead
skip_fails=1  # a part left out for want of time is a failure

study_iomethods() {
  export WARPSTORE_BENCH_COMMAND="scripts/gpu.sh iomethods"
  local json=$root/bench/results/iomethods.json file=${FILE:-/tmp/warpstore-bench.dat}
  machine_log
  {
    ls -l /usr/local/cuda/lib64/libcufile* /usr/lib/x86_64-linux-gnu/libcufile* 2>&1
    ldconfig -p 2>/dev/null | grep -i cufile || echo "ldconfig: no libcufile"
    lsmod 2>/dev/null | grep -i nvidia_fs || echo "nvidia_fs: not loaded"
  } >>"$out/machine.log" 2>&1
  gpu_build 6 warpstore-bench

  # cufile.json variants: compatibility mode allowed (the main run), forced.
  local force
  for force in false true; do
    cat >"$out/cufile-$([ $force = true ] && echo forcecompat || echo compat).json" <<JSON
{
  "logging": { "dir": "$out", "level": "ERROR" },
  "properties": {
    "allow_compat_mode": true,
    "force_compat_mode": $force
  }
}
JSON
  done

  local common=(--file "$file" --file-size 8GiB --json "$json" --service-threads 8 --direct off)
  # part NAME CAP_SECONDS CUFILE_JSON ARGS...: one process merging into the
  # JSON, so a part that fails or runs out of time loses only its own
  # results; each measures the io_uring ceiling again. CUFILE_JSON: the
  # cufile.json to use ("" for none).
  part() {
    local name=$1 cap=$2 cufile=$3
    shift 3
    local run=(env -u CUFILE_ENV_PATH_JSON)
    [ -z "$cufile" ] || run=(env CUFILE_ENV_PATH_JSON="$cufile")
    timed "iomethods-$name" "$cap/15" "${run[@]}" "$build/bench/warpstore-bench" iomethods "${common[@]}" "$@"
    grep -E "^iomethods\.|FAILED|error" "$out/iomethods-$name.log" | tail -40 >&2
  }
  part main 110 "$out/cufile-compat.json" --fresh --methods uring,pread,mmap,block,array
  part uvm 40 "$out/cufile-compat.json" --methods uvm --no-writes
  part cufile 30 "$out/cufile-compat.json" --methods cufile
  # cuFile diagnostics, short: no cufile.json at all, then compatibility mode forced.
  part cufile-default 15 "" --methods cufile --patterns random4k --bytes 256MiB \
    --slow-bytes 16MiB --cufile-label default
  part cufile-forcecompat 15 "$out/cufile-forcecompat.json" --methods cufile \
    --patterns random4k --bytes 256MiB --slow-bytes 16MiB --cufile-label forcecompat
  rm -f /tmp/warpstore-iomethods-write.dat
  cp "$json" "$out/" 2>/dev/null
}
