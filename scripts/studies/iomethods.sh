#!/usr/bin/env bash
# The I/O-methods comparison (issue 5, item 4) on the GPU machine, in one
# command from the repository root:
#
#   source .deps/unpack-deps.sh; scripts/gpu-iomethods.sh
#
# Builds warpstore-bench (Release, sm_90, build-gpu), then runs
# `warpstore-bench iomethods` on an 8 GiB page-cache-resident pattern file:
# io_uring (the ceiling), pread + cudaMemcpy, mmap + cudaMemcpy, unified
# memory, cuFile, warpstore block and array (cold, hot), random 4 KiB and
# sequential 128 KiB reads, with the sweeps, and writes for the methods that
# can write (io_uring, pwrite, mmap, cuFile: warpstore writes are not built
# yet) into a sparse scratch target in /tmp. cuFile runs with a cufile.json
# that allows compatibility mode (no nvidia-fs on that machine); two short
# extra runs try cuFile with no cufile.json and with compatibility mode
# forced, each recorded under its own name (a failure is recorded with its
# error). The run goes in parts (main, uvm, cufile, the two cuFile variants),
# each a process of its own with its own time limit, merging into
# bench/results/iomethods.json (started afresh by the first), which is copied
# to $OUT with every log. Whole run: at most BUDGET seconds (default 215).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-iomethods-out}
mkdir -p "$out"
build=${BUILD_DIR:-$root/build-gpu}
budget=${BUDGET:-215}
start=$SECONDS
status=0
export WARPSTORE_COMMIT=${WARPSTORE_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
export WARPSTORE_BENCH_COMMAND="scripts/gpu-iomethods.sh"
json=$root/bench/results/iomethods.json
file=${FILE:-/tmp/warpstore-bench.dat}
left() { echo $((budget - (SECONDS - start))); }

{
  date -u
  nvidia-smi -L
  nproc
  free -g | head -2
  df -h /tmp | tail -1
  ls -l /usr/local/cuda/lib64/libcufile* /usr/lib/x86_64-linux-gnu/libcufile* 2>&1
  ldconfig -p 2>/dev/null | grep -i cufile || echo "ldconfig: no libcufile"
  lsmod 2>/dev/null | grep -i nvidia_fs || echo "nvidia_fs: not loaded"
} >"$out/machine.log" 2>&1

echo "== build (warpstore-bench)" >&2
if ! { timeout 150 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_ARCHITECTURES=90 &&
       timeout $(($(left) - 40)) cmake --build "$build" -j 16 --target warpstore-bench; } \
     >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log" >&2
  echo "gpu-iomethods: build failed after $((SECONDS - start)) s" >&2
  exit 1
fi
echo "   built in $((SECONDS - start)) s" >&2
bench=$build/bench/warpstore-bench

# cufile.json variants: compatibility mode allowed (the main run), forced.
cufile_json() {  # $1 = force_compat_mode
  cat <<EOF
{
  "logging": { "dir": "$out", "level": "ERROR" },
  "properties": {
    "allow_compat_mode": true,
    "force_compat_mode": $1
  }
}
EOF
}
cufile_json false >"$out/cufile-compat.json"
cufile_json true >"$out/cufile-forcecompat.json"

common=(--file "$file" --file-size 8GiB --json "$json" --service-threads 8 --direct off)

# Parts, each its own process merging into the JSON, so a part that fails or
# runs out of time loses only its own results. Each measures the io_uring
# ceiling again. part NAME CAP_SECONDS ARGS...
part() {
  local name=$1 cap=$2
  shift 2
  local limit=$(($(left) - 10))
  [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 15 ]; then
    echo "gpu-iomethods: no time left for part $name" >&2
    status=1
    return
  fi
  echo "== iomethods $name (limit ${limit} s, budget left $(left) s)" >&2
  local run=(env)
  [ -n "${CUFILE_ENV_PATH_JSON:-}" ] || run=(env -u CUFILE_ENV_PATH_JSON)
  timeout -k 5 "$limit" "${run[@]}" "$bench" iomethods "${common[@]}" "$@" >"$out/iomethods-$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || { status=1; echo "gpu-iomethods: part $name exited $rc" >&2; }
  grep -E "^iomethods\.|FAILED|error" "$out/iomethods-$name.log" | tail -40 >&2
}

export CUFILE_ENV_PATH_JSON="$out/cufile-compat.json"
part main 110 --fresh --methods uring,pread,mmap,block,array
part uvm 40 --methods uvm --no-writes
part cufile 30 --methods cufile
# cuFile diagnostics, short: no cufile.json at all, then compatibility mode forced.
CUFILE_ENV_PATH_JSON="" part cufile-default 15 --methods cufile --patterns random4k --bytes 256MiB \
  --slow-bytes 16MiB --cufile-label default
CUFILE_ENV_PATH_JSON="$out/cufile-forcecompat.json" part cufile-forcecompat 15 --methods cufile \
  --patterns random4k --bytes 256MiB --slow-bytes 16MiB --cufile-label forcecompat
rm -f /tmp/warpstore-iomethods-write.dat

cp "$json" "$out/" 2>/dev/null
echo "gpu-iomethods: done in $((SECONDS - start)) s, status $status" >&2
exit $status
