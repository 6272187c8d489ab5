# scripts/gpu.sh engine [STEP...]: the Python engine and training-loop
# studies. Rows go to $OUT/*.json.
#   tests        suite and pytest below (no longer fits one 600 s device call
#                on a fresh machine: run `suite`, then `pytest`)
#   suite        the GPU test suite alone (the 7 binaries of ctest -L gpu, bulk
#                reads included; no Python extension built)
#   pytest       builds the Python extension (both targets) and runs pytest
#                with the CUDA backend (the concurrency, interrupt and
#                idle-engine tests among them; 766 tests, about 420 s on an
#                H200 after a 190 s build, 2026-12-03: on a fresh machine
#                run a part a call, PYTEST_FILES naming the files)
#   stress       the Python stress and interrupt study (bench/python_stress.py)
#                on both backends, three processes at once (about 7 minutes;
#                STRESS_OPS, STRESS_S)
#   pyasync      python/tests/test_async.py alone
#   bench        engine, graphsage and attribution:
#   engine       the engine's cost to the process (bench/python_engine.py)
#   graphsage    GraphSAGE with the library's defaults (apps/graphsage/train.py)
#   attribution  GraphSAGE without fetch-ahead, and with the CPU sampler
#   smoke        the GPU read and batch tests alone
#   repeats      gpu_array_batch_test's pinned batches (WarpsPrefetchWaitAndRead)
#                run BATCH_REPEATS times (12); any failed run fails the step
#   async        the kernel example (bench/async_kernel_bench.cu, the chain of layers)
#   cold         GraphSAGE over 7.6 GiB of features, every epoch cold, against
#                memmap and the device's random 4 KiB read rate (about 6
#                minutes; COLD_S)
#   fetch        the feature fetch alone (bench/python_fetch.py): warpstore
#                against memmap and pinned host memory, per batch of rows
#   variants     the tuning switches not yet on by default, one run each:
#                gather_sm_share x queue_spread for the GPU op beside a
#                gather, GraphSAGE and the fetch; combine_reads for the fetch
#                and the regime map's dense cells (VARIANTS overrides the list)
#   pressure     more lines wanted than the cache holds (bench/python_pressure.py):
#                2 M uint32 through 1024 lines of 64 KiB, and gathers at 0.1x,
#                1x and 10x the cache against the miss path
#   pressure-ab  the same against another commit's tree (AB_BASE, default
#                f7efc18: before the 1-D miss path of 64 KiB lines ran 11x
#                slower), its extension built beside this one from `git
#                archive`; the two run alternately AB_ROUNDS times (2) into
#                pressure-{this,base}-N.json (about 4 minutes on a fresh machine)
study_summary="Python engine: GPU suite + pytest, stress, engine cost, GraphSAGE, fetch"
study_steps="tests suite pytest stress pyasync bench engine graphsage attribution smoke repeats async cold fetch pressure pressure-ab variants"

study_engine() {
  local py=${PYTHON:-python3}
  machine_log
  "$py" -c "import torch; print('torch', torch.__version__, torch.get_num_threads(), 'threads')" \
    >>"$out/machine.log" 2>&1

  local gpu_test_names=(gpu_array_read_test gpu_array_write_test gpu_queue_test gpu_checkpoint_test
                        gpu_log_test gpu_array_batch_test gpu_bulk_read_test)
  # shellcheck disable=SC2046 # lists of target names
  # Every step but the GPU suite, the smoke test, the repeats and the
  # kernel example runs Python.
  local st python_target=""
  for st in $steps; do
    case $st in suite | smoke | repeats | async) ;; *) python_target=warpstore_python ;; esac
  done
  GPU_CMAKE_ARGS="-DWARPSTORE_PYTHON=ON -DPython_EXECUTABLE=$(command -v "$py") ${GPU_CMAKE_ARGS:-}" \
    gpu_build 7 $python_target $( (want tests || want suite) && echo "${gpu_test_names[@]}") \
    $(want smoke && echo gpu_array_read_test gpu_array_batch_test) \
    $(want repeats && echo gpu_array_batch_test) \
    $(want async && echo async-kernel-bench)
  export PYTHONPATH=$root/python:$build/python${PYTHONPATH:+:$PYTHONPATH}

  if want tests || want suite; then
    gpu_tests gpu-tests.log "${gpu_test_names[@]}"
  fi
  if want tests || want pytest; then
    # PYTEST_FILES: test files under python/tests (default: all of them).
    local tests=("$root/python/tests") f
    if [ -n "${PYTEST_FILES:-}" ]; then
      tests=()
      for f in $PYTEST_FILES; do tests+=("$root/python/tests/$f"); done
    fi
    timed pytest 540 "$py" -m pytest -q -p no:cacheprovider -rs --durations=15 "${tests[@]}"
  fi

  if want stress; then
    # Three stress processes at once (CPU target over the host and memory
    # controllers, CUDA target over the host controller), 100 s each, then 20
    # interrupts each; the operations add up to concurrency.python.stress.
    run_stress() {  # NAME BACKEND CONTROLLER
      timed "stress-$1" 300 env WARPSTORE_BACKEND="$2" "$py" "$root/bench/python_stress.py" \
        --ops "${STRESS_OPS:-3000000}" --seconds "${STRESS_S:-100}" --threads 8 --controller "$3" \
        --interrupts 20 --json "$out/stress-$1.json"
    }
    local p1 p2 p3 p
    run_stress cpu-host cpu host & p1=$!
    run_stress cpu-memory cpu memory & p2=$!
    run_stress cuda-host cuda host & p3=$!
    for p in $p1 $p2 $p3; do wait "$p" || status=1; done
  fi

  if want pyasync; then  # the asynchronous gathers and fetch-ahead alone
    timed pytest-async 120 "$py" -m pytest -q -p no:cacheprovider -rs "$root/python/tests/test_async.py"
  fi

  if want bench || want engine; then
    timed engine 120 "$py" "$root/bench/python_engine.py" --json "$out/engine.json"
  fi
  # 2 M nodes x 128 float32 (1 GiB, page cache), cache 1/8 of it; the
  # library's defaults and the machine's (no OMP_NUM_THREADS), as a user runs
  # it: neighbors sampled on the GPU, features fetched one batch ahead.
  local gs=("$py" "$root/apps/graphsage/train.py" --nodes 2000000 --dim 128 --epochs 2 --batches 30
            --test-nodes 10000 --dir /tmp --reuse)
  if want bench || want graphsage; then
    timed graphsage 200 "${gs[@]}" --json "$out/graphsage.json"
  fi
  if want bench || want attribution; then
    # Without fetch-ahead; and as before this work (CPU sampler, no fetch-ahead).
    timed graphsage-sync 150 "${gs[@]}" --fetch-ahead off --sources warpstore,memmap \
      --name graphsage.host.sync --json "$out/graphsage-sync.json"
    timed graphsage-cpu-sampler 150 "${gs[@]}" --fetch-ahead off --sampler cpu \
      --sources warpstore,memmap --name graphsage.host.cpu_sampler \
      --json "$out/graphsage-cpu-sampler.json"
  fi
  rm -f /tmp/graphsage-2000000x128.f32

  if want smoke; then  # a short GPU check: array reads and the asynchronous batches of kernels
    gpu_tests gpu-smoke.log gpu_array_read_test gpu_array_batch_test
  fi

  if want repeats; then  # pinned kernel batches, run again and again (a race shows in some runs)
    step "batch repeats: ${BATCH_REPEATS:-12} runs of GpuBatch.WarpsPrefetchWaitAndRead"
    timeout 300 "$build/tests/gpu/gpu_array_batch_test" --gtest_repeat="${BATCH_REPEATS:-12}" \
      --gtest_filter='Controllers/GpuBatch.WarpsPrefetch*' >"$out/batch-repeats.log" 2>&1
    local failed
    failed=$(grep -c '^\[  FAILED  \] Controllers' "$out/batch-repeats.log")
    echo "batch repeats: $failed failed, $(grep -c '^\[       OK' "$out/batch-repeats.log") passed" |
      tee -a "$out/summary.log" >&2
    [ "$failed" = 0 ] || fail "batch repeats ($failed failed)"
    pack_logs
  fi

  if want async; then  # the kernel example (the chain of scripts/gpu.sh async): sync vs async vs CPU
    timed async-kernel 150 "$build/bench/async-kernel-bench" --file /tmp/warpstore-async-layers.f32 \
      --layers 8 --k 8192 --n 2048 --cache-bytes 2GiB --trials 3 --json "$out/async.json"
    rm -f /tmp/warpstore-async-layers.f32
  fi

  if want cold; then
    # 16 M nodes x 128 float32 (7.6 GiB) with every epoch started cold (pages
    # dropped, warpstore's cache emptied); direct="auto", the default, as a
    # user's cold file gets. Fetched synchronously, so the fetch's own rate is
    # measured; then the device's random 4 KiB O_DIRECT read rate on the same
    # file.
    timed graphsage-cold "${COLD_S:-300}" "$py" "$root/apps/graphsage/train.py" --nodes 16000000 \
      --dim 128 --epochs 2 --batches 3 --test-nodes 1000 --dir /tmp --reuse --cold --direct auto \
      --fetch-ahead off --sources warpstore,memmap --name graphsage.cold \
      --json "$out/graphsage-cold.json"
    timed device-rate 60 "$py" "$root/bench/device_rate.py" /tmp/graphsage-16000000x128.f32 \
      --seconds 10 --depth 64 --json "$out/device-rate.json"
    rm -f /tmp/graphsage-16000000x128.f32
  fi

  if want fetch; then
    timed fetch 240 "$py" "$root/bench/python_fetch.py" --json "$out/fetch.json"
    rm -f /tmp/fetch-2000000x128.f32
  fi

  if want variants; then
    # Each variant is environment settings (the tuning group of README's
    # settings table); results per variant in $out/variant-*.json.
    local v name
    for v in ${VARIANTS:-"WARPSTORE_GATHER_SM_SHARE=0" "WARPSTORE_QUEUE_SPREAD=1"
                         "WARPSTORE_GATHER_SM_SHARE=4,WARPSTORE_QUEUE_SPREAD=1"
                         "WARPSTORE_GATHER_SM_SHARE=8,WARPSTORE_QUEUE_SPREAD=1"
                         "WARPSTORE_COMBINE_READS=1"}; do
      name=${v//WARPSTORE_/}; name=${name//,/-}; name=${name//=/}
      # shellcheck disable=SC2086 # the variant's VAR=VALUE words
      timed "variant-$name" 200 env ${v//,/ } sh -c '
        "$0" "$1/bench/python_engine.py" --idle-s 1 --arrays 3 --json "$2/variant-'"$name"'-engine.json" &&
        "$0" "$1/apps/graphsage/train.py" --nodes 2000000 --dim 128 --epochs 2 --batches 30 \
          --test-nodes 10000 --dir /tmp --reuse --sources warpstore,gpu \
          --json "$2/variant-'"$name"'-graphsage.json" &&
        "$0" "$1/bench/python_fetch.py" --json "$2/variant-'"$name"'-fetch.json"' \
        "$py" "$root" "$out"
    done
    rm -f /tmp/graphsage-2000000x128.f32 /tmp/fetch-2000000x128.f32
  fi

  if want pressure; then
    timed pressure 240 "$py" "$root/bench/python_pressure.py" --dir /tmp --json "$out/pressure.json"
  fi

  if want pressure-ab; then
    local base=${AB_BASE:-f7efc18} tree=/tmp/ab-tree bdir=/tmp/ab-build k
    rm -rf "$tree" && mkdir -p "$tree"
    if ! git -C "$root" archive "$base" | tar -x -C "$tree"; then
      fail "pressure-ab: no tree of $base (git archive)"
    elif ! (root=$tree build=$bdir study_name="$study_name (base $base)" \
              GPU_CMAKE_ARGS="-DWARPSTORE_PYTHON=ON -DPython_EXECUTABLE=$(command -v "$py")" \
              gpu_build 5 warpstore_python); then  # a subshell: its exit ends only the base's build
      fail "pressure-ab: the build of $base failed (build.log)"
    else
      for k in $(seq "${AB_ROUNDS:-2}"); do
        timed "pressure-this-$k" 90 "$py" "$root/bench/python_pressure.py" --dir /tmp \
          --json "$out/pressure-this-$k.json"
        timed "pressure-base-$k" 90 env PYTHONPATH="$tree/python:$bdir/python" \
          "$py" "$tree/bench/python_pressure.py" --dir /tmp --json "$out/pressure-base-$k.json"
      done
    fi
  fi
}
