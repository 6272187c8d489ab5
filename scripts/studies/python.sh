# scripts/gpu.sh python [gather] [bulk] [graphsage] [cpu] [matrix]: the
# Python package on the GPU, within $BUDGET seconds (default 320; 590 when
# matrix is named) including the build. Builds
# the extension (both targets) with CMake into build-gpu and puts it on
# PYTHONPATH (no pip: nothing can be downloaded there); then
#   gather     the gather benchmark (bench/python_gather.py: 4 GiB file in the
#              page cache, batches of 512 MiB of rows, 2 GiB cache, 8 service
#              threads), which rewrites bench/results/gather.json (copied to
#              $OUT, with its plot gather.png)
#   bulk       the bulk-read benchmark (bench/python_bulk.py: 64 MiB and
#              1 GiB ranges of a file in the page cache into GPU memory,
#              Array.read against KvikIO CuFile.read, where kvikio imports,
#              and a read into pinned memory plus .to("cuda")), which rewrites
#              bench/results/bulk.json (copied to $OUT)
#   graphsage  the GraphSAGE example (warpstore vs GPU memory vs memmap, same
#              seed; 2 M nodes, 128 float32 features: a 1 GiB file, cache
#              128 MiB = 1/8; 2 epochs of 30 batches)
#   cpu        the CPU target (bench/python_cpu_target.py: gathers of 1 K and
#              64 K rows of 512 B with backend="cpu", one caller and four,
#              against np.memmap; the threads left in the process), which
#              rewrites bench/results/cpu_target.json (copied to $OUT)
#   matrix     the regime map (bench/python_matrix.py: every gather method
#              over row size, batch, working set / cache, residency and
#              density, and bulk reads of 64 MiB, 1 GiB and 8 GiB; a 2 GiB and
#              an 8 GiB file in /tmp, removed after) within what the call has
#              left (at most 480 s), rewriting bench/results/regimes.json
#              (copied to $OUT) and, where matplotlib is installed,
#              bench/results/plots/regimes-*.png. Only when named
#              (`scripts/gpu.sh python matrix`): it takes a call of its own.
#              MATRIX_ARGS adds arguments (e.g. --scale 1/8 for a smoke test).
# BENCH_SIZE, BENCH_BATCH, BENCH_CACHE, BULK_SIZES and GRAPH_NODES shrink it
# for a smoke test elsewhere. A step skipped for want of time is a failure.
study_summary="Python package: gather benchmark (gather.json), bulk reads (bulk.json), the CPU target (cpu_target.json), GraphSAGE (pytest on the GPU: scripts/gpu.sh engine tests)"
study_steps="gather bulk graphsage cpu matrix"
study_budget=320
tail_lines=25
skip_fails=1

study_python() {
  local py=${PYTHON:-python3}
  # The regime map needs most of a 10-minute call: a budget of its own.
  [[ $steps == *" matrix "* && -z ${BUDGET:-} ]] && budget=590
  machine_log
  {
    "$py" -c "import sys, numpy, torch; print(sys.version); print('numpy', numpy.__version__, 'torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"
    "$py" -c "import nanobind; print('nanobind', nanobind.__version__)"
    "$py" -c "import torch_geometric, torch_geometric.typing as t; print('pyg', torch_geometric.__version__, 'pyg-lib', t.WITH_PYG_LIB, 'torch-sparse', t.WITH_TORCH_SPARSE)"
    "$py" -c "import matplotlib; print('matplotlib', matplotlib.__version__)"
  } >>"$out/machine.log" 2>&1
  cat "$out/machine.log" >&2
  GPU_CMAKE_ARGS="-DWARPSTORE_PYTHON=ON -DPython_EXECUTABLE=$(command -v "$py") ${GPU_CMAKE_ARGS:-}" \
    gpu_build 6 warpstore_python
  export PYTHONPATH=$root/python:$build/python${PYTHONPATH:+:$PYTHONPATH}

  if want gather; then
    WARPSTORE_BENCH_COMMAND="source .deps/unpack-deps.sh; scripts/gpu.sh python gather" \
      timed gather-bench 75 "$py" "$root/bench/python_gather.py" --file /tmp/warpstore-gather.dat \
      --size "${BENCH_SIZE:-4GiB}" --batch "${BENCH_BATCH:-512MiB}" --cache "${BENCH_CACHE:-2GiB}" \
      --threads 8 --json "$root/bench/results/gather.json" --plot "$out/gather.png"
    cp "$root/bench/results/gather.json" "$out/" 2>/dev/null
    rm -f /tmp/warpstore-gather.dat
  fi
  if want bulk; then
    WARPSTORE_BENCH_COMMAND="source .deps/unpack-deps.sh; scripts/gpu.sh python bulk" \
      timed bulk-bench 45 "$py" "$root/bench/python_bulk.py" --file /tmp/warpstore-bulk.dat \
      --sizes "${BULK_SIZES:-64MiB,1GiB}" --json "$root/bench/results/bulk.json"
    cp "$root/bench/results/bulk.json" "$out/" 2>/dev/null
    rm -f /tmp/warpstore-bulk.dat
  fi
  if want graphsage; then
    local nodes=${GRAPH_NODES:-2000000}
    timed graphsage 70 "$py" "$root/apps/graphsage/train.py" --nodes "$nodes" --dim 128 --epochs 2 \
      --batches 30 --test-nodes 10000 --threads 8 --dir /tmp
    rm -f "/tmp/graphsage-${nodes}x128.f32"
  fi
  if want cpu; then
    WARPSTORE_BENCH_COMMAND="source .deps/unpack-deps.sh; scripts/gpu.sh python cpu" \
      timed cpu-target 60 "$py" "$root/bench/python_cpu_target.py" --calls 100 \
      --json "$root/bench/results/cpu_target.json"
    cp "$root/bench/results/cpu_target.json" "$out/" 2>/dev/null
  fi
  if [[ $steps == *" matrix "* ]]; then  # not part of `all`
    local mb=$(($(left) - 70))
    [ "$mb" -gt 480 ] && mb=480
    # shellcheck disable=SC2086 # MATRIX_ARGS is a list of words
    WARPSTORE_BENCH_COMMAND="source .deps/unpack-deps.sh; scripts/gpu.sh python matrix" \
      timed matrix $((mb + 60))/120 "$py" "$root/bench/python_matrix.py" --budget-s "$mb" \
      --dir /tmp --json "$root/bench/results/regimes.json" --plots "$root/bench/results/plots" \
      ${MATRIX_ARGS:-}
    cp "$root/bench/results/regimes.json" "$out/" 2>/dev/null
    cp "$root"/bench/results/plots/regimes-*.png "$out/" 2>/dev/null
  fi
}
