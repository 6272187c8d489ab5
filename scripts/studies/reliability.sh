#!/usr/bin/env bash
# The reliability study on the GPU machine, in one command, from the checkout:
#
#   source .deps/unpack-deps.sh; scripts/gpu-reliability.sh
#
# Builds warpstore-reliability-gpu (Release, sm_90), runs it in a reduced
# form under compute-sanitizer memcheck, racecheck and synccheck, then in full:
# the fault kinds and hostile inputs read by kernels, the cache-pressure runs
# (every slot pinned, hot spot, Zipf, 1 M threads), the 100 GB read soak and
# the mixed read/write soak (soak.readwrite.gpu: 4 K writer warps, 2 GiB
# through a 32 MiB cache, both controllers, 4 KiB and 64 KiB lines, the file
# compared with the host's model byte for byte after each part).
# Results merge into bench/results/reliability.json (entries of the GPU carry
# ".gpu" where the CPU study has the same name); logs and a copy of the
# results go to $OUT. About 5 minutes; every step has its own time limit.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-reliability-out}
mkdir -p "$out"
build=${BUILD_DIR:-$root/build-gpu}
export WARPSTORE_COMMIT=${WARPSTORE_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
export WARPSTORE_BENCH_COMMAND=${WARPSTORE_BENCH_COMMAND:-"source .deps/unpack-deps.sh; scripts/gpu-reliability.sh"}
json=$root/bench/results/reliability.json
bin=$build/bench/warpstore-reliability-gpu
status=0
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }

echo "== build ($(elapsed))" >&2
if ! { timeout 150 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_ARCHITECTURES=90 &&
       timeout 150 cmake --build "$build" -j 16 --target warpstore-reliability-gpu; } \
     >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log" >&2
  echo "gpu-reliability: build failed" >&2
  exit 1
fi

# compute-sanitizer on a small run: two fault kinds, small soaks, few threads
# (the read/write soak's cache must hold one set of 16 lines of 64 KiB).
small=(--no-json --no-hostile --kinds io_error,stall --reads 2K --file-size 2M --cache 64K
       --timeout-ms 2000 --soak-bytes 16M --soak-file 128M --soak-cache 4M --pressure-threads 0
       --rw-file 32M --rw-cache 1M --rw-writers 32 --rw-ops 16 --rw-rounds 1 --dir /tmp)
clean=()
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool ($(elapsed))" >&2
  if timeout 45 "$sanitizer" --tool "$tool" --error-exitcode 9 "$bin" "${small[@]}" \
       >"$out/sanitizer-$tool.log" 2>&1; then
    clean+=("compute-sanitizer-$tool")
  else
    echo "compute-sanitizer $tool: exit $? (see sanitizer-$tool.log)" >&2
    tail -5 "$out/sanitizer-$tool.log" >&2
  fi
done
runs=$(IFS=,; echo "${clean[*]:-}")

echo "== study: faults, hostile inputs, cache pressure, 100 GB soak, read/write soak ($(elapsed))" >&2
if ! timeout 420 "$bin" --json "$json" --dir /tmp --timeout-ms 2000 --sanitizer-runs "$runs" \
     >"$out/study.log" 2>&1; then
  status=1
  echo "gpu-reliability: study reported a problem (exit code above; see study.log)" >&2
fi
tail -30 "$out/study.log" >&2
cp "$json" "$out/" 2>/dev/null || true
echo "== done in $(elapsed), status $status" >&2
exit $status
