#!/usr/bin/env bash
# The core study on the GPU machine: the ceilings, then raw block I/O through
# both controllers, all merged into bench/results/core.json (started afresh).
#
#   bench/run_core.sh [BUILD_DIR]
#
# Environment: FILE (default /tmp/warpstore-bench.dat), FILE_SIZE (8GiB),
# SERVICE_THREADS (8), CPU_THREADS (1,4,8,14), PART:
#   all        (default) everything, core.json started afresh;
#   essential  the named core figures (ESSENTIAL=1 says the same);
#   scaling    ceilings, block I/O, the delivery comparison and the scaling
#              sweeps, merged into the core.json already there.
# Splitting lets a device session run the study in calls under 10 minutes.
# A failed run is reported and the others still run; the exit status says
# whether all passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${BUILD_DIR:-$root/build}}
bench=$build/bench/warpstore-bench
[ -x "$bench" ] || { echo "run_core.sh: $bench not built" >&2; exit 1; }

export WARPSTORE_BENCH_COMMAND="bench/run_core.sh"  # the one command named in core.json
common=(--file "${FILE:-/tmp/warpstore-bench.dat}" --file-size "${FILE_SIZE:-8GiB}"
        --json "$root/bench/results/core.json")
service=${SERVICE_THREADS:-8}
failed=()
run() {
  echo "== warpstore-bench $*" >&2
  "$bench" "$@" "${common[@]}" || failed+=("$*")
}

part=${PART:-all}
[ "${ESSENTIAL:-0}" = 1 ] && part=essential
case $part in all | essential | scaling) ;; *) echo "run_core.sh: PART must be all, essential or scaling" >&2; exit 2 ;; esac
[ "$part" = all ] && rm -f "$root/bench/results/core.json"  # a full run rewrites the study
# Host controller on the page-cache-resident file (buffered), then once on the disk (O_DIRECT).
host=(--controller host --direct off --service-threads "$service")
if [ "$part" != essential ]; then
run ceilings --cpu-threads "${CPU_THREADS:-1,4,8,14}"
run block "${host[@]}" --request 4K
run block "${host[@]}" --request 512
run block "${host[@]}" --request 64K --pattern sequential --threads 32K
run block --controller host --direct on --service-threads "$service" --request 4K --threads 32K \
  --requests-per-thread 4 --name block.host.direct.random4k
run block --controller memory --request 4K
run block --controller memory --request 512
# Delivering the bytes: the copy engine pushing staging into GPU memory (one
# cudaMemcpyBatchAsync per reaped batch) against the GPU pulling it (above).
run block "${host[@]}" --delivery copy --request 4K --name block.host.random4k.copy
run block "${host[@]}" --delivery copy --request 64K --pattern sequential --threads 32K \
  --name block.host.sequential64k.copy
fi

if [ "$part" != scaling ]; then
# Element reads through the cache: the named core figures.
run array --controller memory --line-size 4K --name array.memory.random4k.cold
run array --controller memory --line-size 512 --figure lines --name array.memory.random512.cold
run array "${host[@]}" --line-size 4K --figure lines --name array.host.pagecache.random4k.cold
run array --controller host --direct on --service-threads 2 --uring-depth 64 --threads 64K \
  --line-size 4K --figure lines --name array.host.direct.random4k.cold
run array --mode hot --controller memory --cache-bytes 4GiB --name array.hot.coalesced4b
run array --mode hot --controller memory --cache-bytes 4GiB --line-size 64K \
  --name array.hot.coalesced4b.line64k
fi

if [ "$part" != essential ]; then
# How throughput scales: GPU threads and line size (memory controller), queue
# pairs and service threads (host controller, page cache).
run array --controller memory --threads 1K,4K,16K,64K,256K,1M --reads-per-thread 2
run array --controller memory --line-size 512,1K,4K,16K,64K
run array "${host[@]}" --threads 1K,4K,16K,64K,256K,1M --reads-per-thread 2 --figure lines
for q in 8 16 32 64 132; do
  run array "${host[@]}" --queues "$q" --figure lines --name "array.host.pagecache.random4k.cold.queues$q"
done
for t in 1 2 4 14; do
  run array --controller host --direct off --service-threads "$t" --figure lines \
    --name "array.host.pagecache.random4k.cold.service$t"
done
fi

if [ ${#failed[@]} -ne 0 ]; then
  printf 'run_core.sh: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "run_core.sh: all runs passed; results in bench/results/core.json" >&2
