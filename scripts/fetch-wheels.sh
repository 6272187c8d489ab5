#!/usr/bin/env bash
# Downloads the competitors' wheels the GPU machine cannot fetch (it has no
# network) into .whl/ (git-ignored): KvikIO for the bulk and regime-map
# comparisons. Carry `.whl` with the device call; scripts/gpu.sh installs
# what is there into /tmp/warpstore-wheels (no dependencies: CUDA and cuFile
# are the machine's) and puts it on PYTHONPATH. Not a dependency of the
# library. Usage: scripts/fetch-wheels.sh [PIP]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pip=${1:-python3 -m pip}
mkdir -p "$root/.whl"
# Python 3.12 on x86_64 (the GPU machine's); compat mode needs no cupy.
$pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 \
  -d "$root/.whl" "kvikio-cu13==26.10.*" "libkvikio-cu13==26.10.*" "rapids-logger==0.3.*" \
  cuda-pathfinder
ls -l "$root/.whl"
