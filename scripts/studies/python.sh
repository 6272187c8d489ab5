#!/usr/bin/env bash
# The Python package's GPU run in one command, on the GPU machine (no network),
# from the checkout, within about 200 s including the build:
#
#   source .deps/unpack-deps.sh; scripts/gpu-python.sh
#
# 1. builds the extension (both targets) with CMake into build-gpu and puts it
#    on PYTHONPATH (no pip: nothing can be downloaded there);
# 2. the gather benchmark (rewrites bench/results/gather.json);
# 3. the pytest suite, GPU tests included;
# 4. the GraphSAGE example (warpstore vs GPU memory vs memmap, same seed).
# BENCH_SIZE, BENCH_BATCH, BENCH_CACHE and GRAPH_NODES shrink it for a smoke
# test elsewhere. Every step has a timeout taken from what is left of the budget; a failed
# step is logged and the next one still runs. Logs and results go to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-python-out}
mkdir -p "$out"
build=${BUILD_DIR:-$root/build-gpu}
budget=${BUDGET_S:-200}
py=${PYTHON:-python3}
status=0
start=$SECONDS
log() { echo "[gpu-python $((SECONDS - start)) s] $*" | tee -a "$out/gpu-python.log" >&2; }
# step NAME CAP_S CMD...: runs CMD with min(CAP_S, budget left) seconds, logs to $out/NAME.log.
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 10 ]; then
    log "$name: skipped, $left s of the budget left"
    status=1
    return 1
  fi
  log "$name: up to $limit s"
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || { status=1; log "$name: FAILED (exit $rc$([ $rc = 124 ] && echo ', timed out'))"; }
  tail -25 "$out/$name.log" >&2
  return $rc
}

{
  nvidia-smi -L; nproc; free -g | head -2; df -h /tmp | tail -1
  "$py" -c "import sys, numpy, torch; print(sys.version); print('numpy', numpy.__version__, 'torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"
  "$py" -c "import nanobind; print('nanobind', nanobind.__version__)"
  "$py" -c "import torch_geometric, torch_geometric.typing as t; print('pyg', torch_geometric.__version__, 'pyg-lib', t.WITH_PYG_LIB, 'torch-sparse', t.WITH_TORCH_SPARSE)"
  "$py" -c "import matplotlib; print('matplotlib', matplotlib.__version__)"
  git -C "$root" rev-parse HEAD
} >"$out/machine.log" 2>&1
cat "$out/machine.log" >&2

configure=(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_CUDA_ARCHITECTURES=90 -DWARPSTORE_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$py")")
step configure 60 "${configure[@]}" &&
  step build 120 cmake --build "$build" -j 16 --target warpstore_python ||
  { log "build failed: nothing else can run"; exit 1; }
export PYTHONPATH=$root/python:$build/python${PYTHONPATH:+:$PYTHONPATH}

# 4 GiB file (page cache), batches of 512 MiB of rows, 2 GiB cache, 8 service threads.
step gather-bench 75 "$py" -m warpstore bench gather --file /tmp/warpstore-gather.dat \
  --size "${BENCH_SIZE:-4GiB}" --batch "${BENCH_BATCH:-512MiB}" --cache "${BENCH_CACHE:-2GiB}" --threads 8 \
  --json "$root/bench/results/gather.json" --plot "$out/gather.png"
cp "$root/bench/results/gather.json" "$out/" 2>/dev/null

step pytest 45 "$py" -m pytest -q -p no:cacheprovider -rs "$root/python/tests"

# 2 M nodes, 128 float32 features (1 GiB file, cache 128 MiB = 1/8), 2 epochs of 30 batches.
nodes=${GRAPH_NODES:-2000000}
step graphsage 70 "$py" "$root/apps/graphsage/train.py" --nodes "$nodes" --dim 128 --epochs 2 \
  --batches 30 --test-nodes 10000 --threads 8 --dir /tmp

rm -f /tmp/warpstore-gather.dat "/tmp/graphsage-${nodes}x128.f32"
log "done in $((SECONDS - start)) s, status $status"
exit $status
