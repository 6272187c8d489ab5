#!/usr/bin/env bash
# The applications study (issue 5: graphs, graph baselines, columnar
# analytics, report) in one command on the GPU machine, from the checkout:
#
#   source .deps/unpack-deps.sh; scripts/gpu-apps.sh
#
# Builds the app targets (build-gpu, Release, sm_90), generates the data
# (Kronecker graph, a smaller weighted graph for SSSP, the taxi table) under
# $DATA (default /tmp/warpstore-apps), runs a small smoke pass of every graph
# method, then the graph study and the taxi study, merging results into
# bench/results/apps.json, and writes bench/REPORT.md. Everything stays
# inside a budget of $BUDGET seconds (default 560) counted from the start:
# each step runs under `timeout` with what is left, optional steps are
# skipped when too little is left, and every step is independent (a failed
# step is logged and the next one runs). Results (apps.json, REPORT.md) go
# to $OUT; every log, the plots and the commit go into one tarball,
# $OUT/gpu-apps-logs.tar.gz, written however the script ends (the device
# tool returns only a few files).
#
# I/O modes: every host-controller run reads through the page cache
# (O_DIRECT off, set in the apps, as the baselines read the files); the
# cold graph runs drop the file's pages first (fadvise DONTNEED) and then
# read buffered from disk. The results' params say so (load_includes,
# direct_io).
#
# Sizes (environment): SCALE (Kronecker scale, default 25: 2^25 vertices,
# 2^29 generated edges stored both ways = 1.07 G CSR edges, 4.3 GB of
# neighbours), SSSP_SCALE (21), TAXI_ROWS (256M), PR_ITERATIONS (3).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-apps-out}
data=${DATA:-/tmp/warpstore-apps}
build=${BUILD_DIR:-$root/build-gpu}
budget=${BUDGET:-560}
scale=${SCALE:-25}
sssp_scale=${SSSP_SCALE:-21}
taxi_rows=${TAXI_ROWS:-256M}
pr_iterations=${PR_ITERATIONS:-3}
mkdir -p "$out" "$data" bench/results
start=$(date +%s)
status=0
# The logs are gathered here and packed into one tarball on exit.
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-apps-logs.XXXXXX")
pack() {
  cp "$root"/bench/results/plots/*.png "$logs/" 2>/dev/null
  cp "$logs/steps.log" "$out/" 2>/dev/null
  tar -czf "$out/gpu-apps-logs.tar.gz" -C "$logs" . && rm -rf "$logs"
}
trap pack EXIT
# The commit the results name: the lead's WARPSTORE_COMMIT (the device's
# copy of the tree may carry a stale .git), else this checkout's HEAD.
if [ -n "${WARPSTORE_COMMIT:-}" ]; then
  commit_from="WARPSTORE_COMMIT"
else
  WARPSTORE_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  commit_from="git rev-parse HEAD (WARPSTORE_COMMIT not set: may be stale)"
fi
export WARPSTORE_COMMIT
echo "commit $WARPSTORE_COMMIT from $commit_from" | tee "$logs/commit.txt" >&2
json=$root/bench/results/apps.json
rm -f "$json"  # this run rewrites the study

left() { echo $((budget - ($(date +%s) - start))); }

# step NAME MAX_SECONDS MIN_SECONDS COMMAND...: runs COMMAND under timeout
# min(MAX, time left - 5), logging to $logs/NAME.log; skipped when less than
# MIN seconds are left.
step() {
  local name=$1 max=$2 min=$3
  shift 3
  local l
  l=$(($(left) - 5))
  if [ "$l" -lt "$min" ]; then
    echo "== $name: skipped, ${l}s left (needs ${min}s)" | tee -a "$logs/steps.log" >&2
    return 1
  fi
  local t=$((max < l ? max : l))
  echo "== $name (timeout ${t}s, $(left)s of the budget left)" | tee -a "$logs/steps.log" >&2
  local s0
  s0=$(date +%s)
  timeout --kill-after=5 "$t" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "   $name: exit $rc after $(($(date +%s) - s0))s" | tee -a "$logs/steps.log" >&2
  if [ $rc -ne 0 ]; then
    status=1
    tail -15 "$logs/$name.log" >&2
  fi
  return $rc
}

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  nproc
  free -g | head -2
  df -h /tmp "$root" | tail -2
  python3 -c "import scipy; print('scipy', scipy.__version__)" 2>&1 | tail -1
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 | tail -1
} >"$logs/machine.log" 2>&1

step configure 60 20 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90
step build 150 30 cmake --build "$build" -j 16 --target warpstore-graph warpstore-taxi \
  warpstore-graphgen warpstore-taxigen || { echo "gpu-apps: build failed" >&2; exit 1; }
bin=$build/apps

# Data. The graph files land in the page cache as they are written.
graph=$data/kron$scale.csr
sssp_graph=$data/kron${sssp_scale}w.csr
taxi=$data/taxi-zone
# A graph already generated under $DATA (the generators are deterministic) is reused.
[ -s "$graph" ] || step gen-graph 90 20 "$bin/warpstore-graphgen" kronecker "$graph" --scale "$scale" --threads 16
[ -s "$sssp_graph" ] ||
  step gen-sssp 20 5 "$bin/warpstore-graphgen" kronecker "$sssp_graph" --scale "$sssp_scale" --weighted --threads 16
step gen-smoke 10 3 "$bin/warpstore-graphgen" kronecker "$data/smoke.csr" --scale 16 --weighted --threads 16

# Every method and algorithm on a small graph first: a broken path shows up
# in seconds, not after the big runs (results not kept).
step smoke 30 10 "$bin/warpstore-graph" "$data/smoke.csr" --algorithms bfs,cc,pagerank,sssp \
  --methods hbm,zerocopy,memory,host,uvm,host-cold,zerocopy-cold --cold-algorithms bfs --json "" \
  --dump "$data/smoke-ref"
# The C++ references every run is checked against, checked in turn by SciPy
# where the machine has it (exit 2: no SciPy, logged, not a failure).
step scipy-check 30 5 bash -c 'python3 "$0"/scripts/graph_check_scipy.py "$1" "$2"; rc=$?; [ $rc -eq 2 ] && exit 0; exit $rc' \
  "$root" "$data/smoke.csr" "$data/smoke-ref"

# The graph study: page-cache methods on the big graph, then the cold ones
# (the file's pages dropped before each) for BFS, then SSSP on the weighted graph.
step graph 300 40 "$bin/warpstore-graph" "$graph" --algorithms bfs,cc,pagerank \
  --methods hbm,zerocopy,memory,host,uvm --iterations "$pr_iterations" --json "$json"
step sssp 40 15 "$bin/warpstore-graph" "$sssp_graph" --algorithms sssp --cold-algorithms sssp \
  --methods hbm,zerocopy,memory,host,uvm --json "$json"

# The columnar study.
step gen-taxi 40 15 "$bin/warpstore-taxigen" "$taxi" --rows "$taxi_rows" --layout zone --threads 16
step taxi 120 20 "$bin/warpstore-taxi" "$taxi" --layout zone --repeat 3 --json "$json"
# The same Q5 sweep with the 4 KiB lines of the first run (its default), to
# show what the 64 KiB lines change (results tagged .line4k).
step taxi-line4k 30 20 "$bin/warpstore-taxi" "$taxi" --layout zone --queries 5 --sweep 0.001,0.05,0.5 \
  --line-size 4K --queue-depth 256 --tag line4k --json "$json"

# Optional, as the budget allows: cold graph runs, and Q5 on a table whose
# long trips are scattered (the layout warpstore cannot exploit).
step graph-cold 45 25 "$bin/warpstore-graph" "$graph" --algorithms bfs \
  --methods zerocopy,host-cold,zerocopy-cold --cold-algorithms bfs --json "$json"
rm -rf "$data/taxi-zone"
if step gen-taxi-shuffled 30 20 "$bin/warpstore-taxigen" "$data/taxi-shuffled" --rows "$taxi_rows" \
     --layout shuffled --threads 16; then
  step taxi-shuffled 25 15 "$bin/warpstore-taxi" "$data/taxi-shuffled" --layout shuffled --queries 5 \
    --sweep 0.01 --json "$json"
fi

# The report, from whatever results exist.
export WARPSTORE_REPORT_COMMAND="source .deps/unpack-deps.sh; scripts/gpu-apps.sh"
step report 20 3 python3 "$root/scripts/report.py" --machine "$logs/machine.log"
cp "$json" "$out/" 2>/dev/null
cp "$root/bench/REPORT.md" "$out/" 2>/dev/null
# Every result must name the commit this run was given.
python3 - "$json" "$WARPSTORE_COMMIT" >>"$logs/steps.log" 2>&1 <<'PY' || status=1
import json, sys
commit = json.load(open(sys.argv[1])).get("commit")
print("results commit", commit, "(expected", sys.argv[2] + ")")
sys.exit(0 if commit == sys.argv[2] else 1)
PY
echo "gpu-apps: done in $(($(date +%s) - start))s, status $status" | tee -a "$logs/steps.log" >&2
exit $status
