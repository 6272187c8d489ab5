#!/usr/bin/env bash
# Tuning runs of the applications study (issue 5) in one command, on the GPU
# machine, from the checkout (about 5 minutes, build included):
#
#   source .deps/unpack-deps.sh; scripts/gpu-apps-tune.sh
#
# Builds the app targets and every GPU test binary, runs the whole GPU suite
# (while the data is generated on the CPU), then the variants that decide
# the study's settings, none of them written to apps.json (--json ""):
#   - CC on the Kronecker graph, host controller against UVM: every edge read
#     or only the sorted prefix below each vertex (--cc-edges), and line
#     sizes 4K, 16K, 64K;
#   - taxi Q4 and Q5 at 1 %: service threads per column (the distance column
#     and each further one), so the busy threads of all six controllers do
#     not outnumber the cores, and the copy-engine delivery.
# Every run is checked against its CPU reference. Logs go to $OUT. PARTS
# (default "tests graph taxi") picks what runs; data already generated under
# $DATA is reused.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-apps-tune
machine_log
data=${DATA:-/tmp/warpstore-apps}
scale=${SCALE:-25}
mkdir -p "$data"
gpu_build 4 warpstore-graph warpstore-taxi warpstore-graphgen warpstore-taxigen gpu_array_read_test \
  gpu_array_write_test gpu_checkpoint_test gpu_log_test gpu_queue_test
bin=$build/apps
graph=$data/kron$scale.csr
taxi=$data/taxi-zone

parts=${PARTS:-tests graph taxi}
has() { [[ " $parts " == *" $1 "* ]]; }

step "data (background) and the GPU suite"
(
  [ -s "$graph" ] || timeout 90 "$bin/warpstore-graphgen" kronecker "$graph" --scale "$scale" --threads 8 \
    >"$out/gen-graph.log" 2>&1
  [ -d "$taxi" ] || timeout 40 "$bin/warpstore-taxigen" "$taxi" --rows 256M --layout zone --threads 8 \
    >"$out/gen-taxi.log" 2>&1
) &
gen=$!
if has tests; then
  for t in "$build"/tests/gpu/gpu_*_test; do
    echo "-- $t" >>"$out/gpu-tests.log"
    timeout 150 "$t" >>"$out/gpu-tests.log" 2>&1 || fail "$(basename "$t") (exit $?)"
  done
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/gpu-tests.log" | tee -a "$out/summary.log" >&2
fi
wait $gen || fail "data generation"

# graph_run TAG ARGS...: one warpstore-graph run, its summary lines kept.
graph_run() {
  local tag=$1
  shift
  step "graph: $tag"
  timeout 90 "$bin/warpstore-graph" "$graph" --algorithms cc --cold-algorithms cc --json "" "$@" >"$out/graph-$tag.log" 2>&1 ||
    fail "graph $tag (exit $?)"
  grep -E "^(uvm|host|memory|zerocopy|hbm) +cc +load|FAILED|WRONG" "$out/graph-$tag.log" |
    sed "s/^/  [$tag] /" | tee -a "$out/summary.log" >&2
}
if has graph; then
  graph_run lower-4k --methods uvm,host
  graph_run all-4k --methods uvm,host --cc-edges all
  graph_run lower-16k --methods host --line-size 16K
  WARPSTORE_QUEUE_DEPTH=64 graph_run lower-64k --methods host --line-size 64K
  WARPSTORE_QUEUE_DEPTH=64 graph_run all-64k --methods host --line-size 64K --cc-edges all
  WARPSTORE_QUEUE_DEPTH=64 WARPSTORE_DELIVERY=copy graph_run lower-64k-copy --methods host --line-size 64K
fi

# taxi_run TAG ARGS...: Q4 and Q5 at 1 %, three warpstore runs each.
taxi_run() {
  local tag=$1
  shift
  step "taxi: $tag"
  timeout 90 "$bin/warpstore-taxi" "$taxi" --queries 4,5 --sweep 0.01 --repeat 3 --json "" "$@" \
    >"$out/taxi-$tag.log" 2>&1 || fail "taxi $tag (exit $?)"
  grep -E "^Q[0-9]|FAILED|WRONG" "$out/taxi-$tag.log" | sed "s/^/  [$tag] /" | tee -a "$out/summary.log" >&2
}
if has taxi; then
  taxi_run threads-8-2
  taxi_run threads-8-1 --column-threads 1
  taxi_run threads-10-1 --column-threads 1 --distance-threads 10
  taxi_run threads-6-1 --column-threads 1 --distance-threads 6
  WARPSTORE_DELIVERY=copy taxi_run copy-8-1 --column-threads 1
fi

step done
tar -czf /tmp/gpu-apps-tune-logs.tar.gz -C "$out" . 2>/dev/null && mv /tmp/gpu-apps-tune-logs.tar.gz "$out/"
exit $status
