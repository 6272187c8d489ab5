# scripts/gpu.sh scale [STEP...]: several GPUs, one process each (torchrun),
# on a machine with two GPUs or more (nvidia-h100-x2 and up). Builds the
# Python extension and warpstore-bench into build-gpu; rows go to
# $OUT/*.json and, merged, to $OUT/scale.json (bench/results/scale.json).
#   pytest     the multi-process tests over NCCL (python/tests/test_distributed.py,
#              test_graphsage_ddp.py)
#   ceilings   the host's io_uring ceiling: raw random 4 KiB reads of an
#              8 GiB file in the page cache at 4, 8, 16 and all-but-two threads
#              (warpstore-bench ceilings), beside the reads it bounds
#   reads      random 4 KiB rows from one 8 GiB file, page cache (host) and
#              pinned memory (memory), 1 GPU then SCALE_GPUS together
#              (bench/python_scale.py reads)
#   peer       private caches against shared line ownership, same streams
#              (bench/python_scale.py peer)
#   graphsage  GraphSAGE with DDP on 1 GPU then SCALE_GPUS, features through
#              warpstore and in GPU memory (bench/python_scale.py graphsage)
#   sim        records the row ids of a one-GPU GraphSAGE epoch (train.py
#              --trace) and replays them through bench/scale_sim.py: N nodes of
#              8 GPUs, cache 1/8 of the features a GPU, against a shared
#              storage service (its rows, simulated, stay in $OUT/sim.json,
#              out of scale.json)
# SCALE_GPUS: the GPU counts (default: 2, and 4 and 8 where present).
study_summary="several GPUs: reads, shared cache ownership, DDP GraphSAGE (scale.json)"
study_steps="pytest ceilings reads peer graphsage sim"
tail_lines=25

study_scale() {
  local py=${PYTHON:-python3}
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  machine_log
  {
    nvidia-smi topo -m
    "$py" -c "import torch; print('torch', torch.__version__, torch.cuda.device_count(), 'GPUs, nccl', torch.cuda.nccl.version())"
  } >>"$out/machine.log" 2>&1
  cat "$out/machine.log" >&2
  local have gpus=${SCALE_GPUS:-}
  have=$("$py" -c "import torch; print(torch.cuda.device_count())")
  if [ -z "$gpus" ]; then
    gpus=2
    [ "$have" -ge 4 ] && gpus=$gpus,4
    [ "$have" -ge 8 ] && gpus=$gpus,8
  fi
  # shellcheck disable=SC2046 # target names
  GPU_CMAKE_ARGS="-DWARPSTORE_PYTHON=ON -DPython_EXECUTABLE=$(command -v "$py") ${GPU_CMAKE_ARGS:-}" \
    gpu_build 6 warpstore_python $(want ceilings && echo warpstore-bench)
  export PYTHONPATH=$root/python:$build/python${PYTHONPATH:+:$PYTHONPATH}
  local bench=("$py" "$root/bench/python_scale.py")

  if want pytest; then
    timed pytest 240 "$py" -m pytest -q -p no:cacheprovider -rs \
      "$root/python/tests/test_distributed.py" "$root/python/tests/test_graphsage_ddp.py"
  fi
  if want ceilings; then
    local cores
    cores=$(nproc)
    timed ceilings 150 "$build/bench/warpstore-bench" ceilings --only uring --file /tmp/scale-ceiling.dat \
      --file-size 8GiB --request 4K --requests 4M --cpu-threads "4,8,16,$((cores - 2))" \
      --json "$out/ceilings.json"
    rm -f /tmp/scale-ceiling.dat
  fi
  if want reads; then
    timed reads 240 "${bench[@]}" reads --gpus "$gpus" --json "$out/reads.json"
    rm -f /tmp/scale-reads.i32
  fi
  if want peer; then
    timed peer 180 "${bench[@]}" peer --gpus "$gpus" --json "$out/peer.json"
    rm -f /tmp/scale-peer.f32
  fi
  if want graphsage; then
    timed graphsage 300 "${bench[@]}" graphsage --gpus "1,$gpus" --json "$out/graphsage.json"
  fi
  if want sim; then
    timed trace 150 "$py" "$root/apps/graphsage/train.py" --nodes 2000000 --dim 128 --epochs 2 \
      --batches 0 --test-nodes 2000 --dir /tmp --reuse --sources warpstore \
      --trace /tmp/graphsage-trace.npz &&
      timed sim 120 "$py" "$root/bench/scale_sim.py" --trace /tmp/graphsage-trace.npz \
        --cache-bytes 128MiB --json "$out/sim.json"
    rm -f /tmp/graphsage-trace.npz
  fi
  rm -f /tmp/graphsage-2000000x128.f32
  "$py" "$root/bench/python_scale.py" collect "$out/reads.json" "$out/ceilings.json" "$out/peer.json" \
    "$out/graphsage.json" --out "$out/scale.json" \
    --command "source .deps/unpack-deps.sh; scripts/gpu.sh scale $(echo $steps)" || status=1
}
