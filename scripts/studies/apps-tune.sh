# scripts/gpu.sh apps-tune [tests] [graph] [taxi] [fill] [graph-ab]: tuning runs of the
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
#   graph-ab the same three algorithms over the memory controller (4 KiB
#          lines, the defaults) with this tree's graph bench and other
#          commits' (AB_BASE, a list, default c7d936a: the apps.json of
#          2026-11-27; each from `git archive`, built beside this one into
#          /tmp/ab-build-REV), taking turns, AB_ROUNDS rounds (default 2),
#          on one graph; logs graph-this-K.log and graph-REV-K.log;
#          AB_METHODS (default memory) the graph bench's --methods. An
#          entry `flags:NAME` is this tree built again with the CMake
#          arguments in AB_CMAKE_ARGS_NAME (words without spaces; logs
#          graph-NAME-K.log), e.g. AB_BASE="flags:uncapped"
#          AB_CMAKE_ARGS_uncapped=-DWARPSTORE_GRAPH_MAX_REGISTERS=0 (the
#          graph kernels before 2026-12-04: no register cap, the rare
#          branches inline). A
#          commit made after the session's first device call is not in the
#          machine's git history: A/B such a change with `flags:NAME`
# Every run is checked against its CPU reference.
study_summary="tuning runs of the apps study (not in apps.json)"
study_steps="tests graph taxi fill graph-ab"
tail_lines=0  # each run's summary lines are shown instead

study_apps_tune() {
  local data=${DATA:-/tmp/warpstore-apps} scale=${SCALE:-25}
  mkdir -p "$data"
  machine_log
  # The other trees' builds run beside this one's (each build's longest
  # part is one unit, the graph bench).
  local ab_bases=${AB_BASE:-c7d936a} ab_pids=() rev
  if want graph-ab; then
    for rev in $ab_bases; do
      if [[ $rev == flags:* ]]; then  # this tree, another build directory
        local name=${rev#flags:}
        local args_var=AB_CMAKE_ARGS_$name
        if [[ ! $name =~ ^[A-Za-z0-9_]+$ ]] || [ -z "${!args_var:-}" ]; then
          fail "graph-ab: $rev needs a name of letters, digits and _ and its arguments in $args_var"
          continue
        fi
        (build=/tmp/ab-build-$name study_name="$study_name ($name)" \
          GPU_CMAKE_ARGS="${!args_var}" gpu_build 8 warpstore-graph) &
        ab_pids+=("$name:$!")
        continue
      fi
      rm -rf "/tmp/ab-tree-$rev" && mkdir -p "/tmp/ab-tree-$rev"
      if git -C "$root" archive "$rev" | tar -x -C "/tmp/ab-tree-$rev"; then
        (root=/tmp/ab-tree-$rev build=/tmp/ab-build-$rev study_name="$study_name (base $rev)" \
          GPU_CMAKE_ARGS="" gpu_build 8 warpstore-graph) &
        ab_pids+=("$rev:$!")
      else
        fail "graph-ab: no tree of $rev (git archive)"
      fi
    done
  fi
  local targets="warpstore-graph warpstore-graphgen"
  want taxi && targets+=" warpstore-taxi warpstore-taxigen"
  want tests && targets+=" gpu_array_read_test gpu_array_write_test gpu_checkpoint_test gpu_log_test \
gpu_queue_test"
  # shellcheck disable=SC2086 # a list of targets
  gpu_build 8 $targets
  local bin=$build/apps gen=$build/tools graph=$data/kron$scale.csr taxi=$data/taxi-zone

  step "data (background) and the GPU suite"
  (
    [ -s "$graph" ] || timeout 90 "$gen/warpstore-graphgen" kronecker "$graph" --scale "$scale" --threads 8 \
      >"$out/gen-graph.log" 2>&1 || exit 1
    ! want taxi || [ -d "$taxi" ] || timeout 40 "$gen/warpstore-taxigen" "$taxi" --rows 256M --layout zone --threads 8 \
      >"$out/gen-taxi.log" 2>&1
  ) &
  local generating=$!
  want tests && gpu_tests gpu-tests.log
  wait $generating || fail "data generation"

  # graph_run TAG DIR ARGS...: one run of DIR/warpstore-graph on the graph,
  # its summary lines kept (log graph-TAG.log).
  graph_run() {
    local tag=$1 dir=$2
    shift 2
    timed "graph-$tag" 90 "$dir/warpstore-graph" "$graph" --json "" "$@"
    grep -E "^(uvm|host|memory|zerocopy|hbm) +[a-z]+ +load|FAILED|WRONG" "$out/graph-$tag.log" |
      sed "s/^/  [$tag] /" | tee -a "$out/summary.log" >&2
  }

  if want graph; then
    # tune_graph TAG ARGS...: CC, this tree's bench.
    tune_graph() {
      local tag=$1
      shift
      graph_run "$tag" "$bin" --algorithms cc --cold-algorithms cc "$@"
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
        WARPSTORE_MEMORY_FILL_TOGETHER=$v graph_run "fill-$v-$round" "$bin" \
          --algorithms bfs,cc,pagerank --methods memory --iterations 3
      done
    done
  fi

  if want graph-ab && [ ${#ab_pids[@]} -gt 0 ]; then
    local built=() entry k
    local ab_args=(--algorithms bfs,cc,pagerank --methods "${AB_METHODS:-memory}" --iterations 3)
    for entry in "${ab_pids[@]}"; do
      if wait "${entry#*:}"; then
        built+=("${entry%%:*}")
      else
        fail "graph-ab: the build of ${entry%%:*} failed (build.log)"
      fi
    done
    for k in $(seq "${AB_ROUNDS:-2}"); do
      graph_run "this-$k" "$bin" "${ab_args[@]}"
      for rev in "${built[@]}"; do
        graph_run "$rev-$k" "/tmp/ab-build-$rev/apps" "${ab_args[@]}"
      done
    done
  fi
}
