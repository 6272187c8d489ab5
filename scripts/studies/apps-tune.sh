# scripts/gpu.sh apps-tune [tests] [graph] [taxi] [fill]: tuning runs of the
# applications study (about 5 minutes, build included), none of them written
# to apps.json (--json ""). Each step builds only what it runs.
#   tests  the whole GPU suite (gpu-tests.log), while the data is generated
#          on the CPU (graph and taxi table under $DATA, reused when there)
#   graph  CC on the Kronecker graph, host controller against UVM: every edge
#          read or only the sorted prefix below each vertex (--cc-edges), and
#          line sizes 4K, 16K, 64K
#   taxi   taxi Q4 and Q5 at 1 %: service threads per column (the distance
#          column and each further one), so the busy threads of all six
#          controllers do not outnumber the cores, and the copy-engine delivery
#   fill   BFS, CC and PageRank over the memory controller (4 KiB lines) with
#          WARPSTORE_MEMORY_FILL_TOGETHER 0 (every line in turn), the
#          default, and 65536 (every line together, the fills of 9c24b7a),
#          taking turns, FILL_ROUNDS rounds (default 2); SCALE=23 makes it
#          quick
# Every run is checked against its CPU reference.
study_summary="tuning runs of the apps study (not in apps.json)"
study_steps="tests graph taxi fill"
tail_lines=0  # each run's summary lines are shown instead

study_apps_tune() {
  local data=${DATA:-/tmp/warpstore-apps} scale=${SCALE:-25}
  mkdir -p "$data"
  machine_log
  local targets="warpstore-graph warpstore-graphgen"
  want taxi && targets+=" warpstore-taxi warpstore-taxigen"
  want tests && targets+=" gpu_array_read_test gpu_array_write_test gpu_checkpoint_test gpu_log_test \
gpu_queue_test"
  # shellcheck disable=SC2086 # a list of targets
  gpu_build 4 $targets
  local bin=$build/apps gen=$build/tools graph=$data/kron$scale.csr taxi=$data/taxi-zone

  step "data (background) and the GPU suite"
  (
    [ -s "$graph" ] || timeout 90 "$gen/warpstore-graphgen" kronecker "$graph" --scale "$scale" --threads 8 \
      >"$out/gen-graph.log" 2>&1
    ! want taxi || [ -d "$taxi" ] || timeout 40 "$gen/warpstore-taxigen" "$taxi" --rows 256M --layout zone --threads 8 \
      >"$out/gen-taxi.log" 2>&1
  ) &
  local generating=$!
  want tests && gpu_tests gpu-tests.log
  wait $generating || fail "data generation"

  if want graph; then
    # tune_graph TAG ARGS...: one warpstore-graph run, its summary lines kept.
    tune_graph() {
      local tag=$1
      shift
      timed "graph-$tag" 90 "$bin/warpstore-graph" "$graph" --algorithms cc --cold-algorithms cc --json "" "$@"
      grep -E "^(uvm|host|memory|zerocopy|hbm) +cc +load|FAILED|WRONG" "$out/graph-$tag.log" |
        sed "s/^/  [$tag] /" | tee -a "$out/summary.log" >&2
    }
    tune_graph lower-4k --methods uvm,host
    tune_graph all-4k --methods uvm,host --cc-edges all
    tune_graph lower-16k --methods host --line-size 16K
    WARPSTORE_QUEUE_DEPTH=64 tune_graph lower-64k --methods host --line-size 64K
    WARPSTORE_QUEUE_DEPTH=64 tune_graph all-64k --methods host --line-size 64K --cc-edges all
    WARPSTORE_QUEUE_DEPTH=64 WARPSTORE_DELIVERY=copy tune_graph lower-64k-copy --methods host --line-size 64K
  fi

  if want taxi; then
    # tune_taxi TAG ARGS...: Q4 and Q5 at 1 %, three warpstore runs each.
    tune_taxi() {
      local tag=$1
      shift
      timed "taxi-$tag" 90 "$bin/warpstore-taxi" "$taxi" --queries 4,5 --sweep 0.01 --repeat 3 --json "" "$@"
      grep -E "^Q[0-9]|FAILED|WRONG" "$out/taxi-$tag.log" | sed "s/^/  [$tag] /" | tee -a "$out/summary.log" >&2
    }
    tune_taxi threads-8-2
    tune_taxi threads-8-1 --column-threads 1
    tune_taxi threads-10-1 --column-threads 1 --distance-threads 10
    tune_taxi threads-6-1 --column-threads 1 --distance-threads 6
    WARPSTORE_DELIVERY=copy tune_taxi copy-8-1 --column-threads 1
  fi

  if want fill; then
    local round v
    for round in $(seq "${FILL_ROUNDS:-2}"); do
      for v in 0 1024 65536; do
        WARPSTORE_MEMORY_FILL_TOGETHER=$v timed "fill-$v-$round" 90/10 "$bin/warpstore-graph" "$graph" \
          --algorithms bfs,cc,pagerank --methods memory --iterations 3 --json ""
        grep -E "^memory +(bfs|cc|pagerank) +load|FAILED|WRONG" "$out/fill-$v-$round.log" |
          sed "s/^/  [fill $v #$round] /" | tee -a "$out/summary.log" >&2
      done
    done
  fi
}
