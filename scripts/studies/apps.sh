# scripts/gpu.sh apps: the applications study (graphs, graph baselines,
# columnar analytics, report).
#
# Builds the app targets, generates the data (Kronecker graph, a smaller
# weighted graph for SSSP, the taxi table) under $DATA (default
# /tmp/warpstore-apps), runs a small smoke pass of every graph method, then
# the graph study and the taxi study, merging results into
# bench/results/apps.json (rewritten), and writes bench/REPORT.md; both are
# copied to $OUT with the plots. Everything stays inside a budget of $BUDGET
# seconds (default 560) counted from the start: each step runs under
# `timeout` with what is left, optional steps are skipped when too little is
# left, and every step is independent.
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
study_summary="graphs, graph baselines, taxi analytics, bench/REPORT.md (apps.json)"
study_steps=""
study_budget=560
tail_lines=0  # a passing step's log stays in its file

study_apps() {
  local data=${DATA:-/tmp/warpstore-apps} scale=${SCALE:-25} sssp_scale=${SSSP_SCALE:-21}
  local taxi_rows=${TAXI_ROWS:-256M} pr_iterations=${PR_ITERATIONS:-3}
  local json=$root/bench/results/apps.json
  mkdir -p "$data"
  machine_log
  {
    python3 -c "import scipy; print('scipy', scipy.__version__)" 2>&1 | tail -1
    python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 | tail -1
  } >>"$out/machine.log"
  rm -f "$json"  # this run rewrites the study
  gpu_build 6 warpstore-graph warpstore-taxi warpstore-graphgen warpstore-taxigen
  local bin=$build/apps gen=$build/tools

  # Data. The graph files land in the page cache as they are written. A
  # graph already generated under $DATA (the generators are deterministic)
  # is reused.
  local graph=$data/kron$scale.csr sssp_graph=$data/kron${sssp_scale}w.csr taxi=$data/taxi-zone
  [ -s "$graph" ] || timed gen-graph 90/20 "$gen/warpstore-graphgen" kronecker "$graph" --scale "$scale" --threads 16
  [ -s "$sssp_graph" ] ||
    timed gen-sssp 20/5 "$gen/warpstore-graphgen" kronecker "$sssp_graph" --scale "$sssp_scale" --weighted --threads 16
  timed gen-smoke 10/3 "$gen/warpstore-graphgen" kronecker "$data/smoke.csr" --scale 16 --weighted --threads 16

  # Every method and algorithm on a small graph first: a broken path shows up
  # in seconds, not after the big runs (results not kept).
  timed smoke 30/10 "$bin/warpstore-graph" "$data/smoke.csr" --algorithms bfs,cc,pagerank,sssp \
    --methods hbm,zerocopy,memory,host,uvm,host-cold,zerocopy-cold --cold-algorithms bfs --json "" \
    --dump "$data/smoke-ref"
  # The C++ references every run is checked against, checked in turn by SciPy
  # where the machine has it (exit 2: no SciPy, logged, not a failure).
  timed scipy-check 30/5 bash -c 'python3 "$0"/scripts/graph_check_scipy.py "$1" "$2"; rc=$?; [ $rc -eq 2 ] && exit 0; exit $rc' \
    "$root" "$data/smoke.csr" "$data/smoke-ref"

  # The graph study: page-cache methods on the big graph, then the cold ones
  # (the file's pages dropped before each) for BFS, then SSSP on the weighted graph.
  timed graph 300/40 "$bin/warpstore-graph" "$graph" --algorithms bfs,cc,pagerank \
    --methods hbm,zerocopy,memory,host,uvm --iterations "$pr_iterations" --json "$json"
  timed sssp 40/15 "$bin/warpstore-graph" "$sssp_graph" --algorithms sssp --cold-algorithms sssp \
    --methods hbm,zerocopy,memory,host,uvm --json "$json"

  # The columnar study.
  timed gen-taxi 40/15 "$gen/warpstore-taxigen" "$taxi" --rows "$taxi_rows" --layout zone --threads 16
  timed taxi 120/20 "$bin/warpstore-taxi" "$taxi" --layout zone --repeat 3 --json "$json"
  # The same Q5 sweep with the 4 KiB lines of the first run (its default), to
  # show what the 64 KiB lines change (results tagged .line4k).
  timed taxi-line4k 30/20 "$bin/warpstore-taxi" "$taxi" --layout zone --queries 5 --sweep 0.001,0.05,0.5 \
    --line-size 4K --depth 256 --tag line4k --json "$json"

  # Optional, as the budget allows: cold graph runs, and Q5 on a table whose
  # long trips are scattered (the layout warpstore cannot exploit).
  timed graph-cold 45/25 "$bin/warpstore-graph" "$graph" --algorithms bfs \
    --methods zerocopy,host-cold,zerocopy-cold --cold-algorithms bfs --json "$json"
  rm -rf "$data/taxi-zone"
  if timed gen-taxi-shuffled 30/20 "$gen/warpstore-taxigen" "$data/taxi-shuffled" --rows "$taxi_rows" \
       --layout shuffled --threads 16; then
    timed taxi-shuffled 25/15 "$bin/warpstore-taxi" "$data/taxi-shuffled" --layout shuffled --queries 5 \
      --sweep 0.01 --json "$json"
  fi

  # The report, from whatever results exist.
  export WARPSTORE_REPORT_COMMAND="source .deps/unpack-deps.sh; scripts/gpu.sh apps"
  timed report 20/3 python3 "$root/scripts/report.py" --machine "$out/machine.log"
  cp "$json" "$root/bench/REPORT.md" "$out/" 2>/dev/null
  cp "$root"/bench/results/plots/*.png "$out/" 2>/dev/null
  # Every result must name the commit this run was given.
  python3 - "$json" "$WARPSTORE_COMMIT" >>"$out/summary.log" 2>&1 <<'PY' || status=1
import json, sys
commit = json.load(open(sys.argv[1])).get("commit")
print("results commit", commit, "(expected", sys.argv[2] + ")")
sys.exit(0 if commit == sys.argv[2] else 1)
PY
}
