#!/usr/bin/env bash
# The Python package's tests: a virtual environment with the build tools,
# NumPy, pytest, PyTorch and PyTorch Geometric; `pip install .` (the CPU
# target, plus the CUDA one where a GPU is present); then pytest. GPU tests
# run only where CUDA is available.
#   WARPSTORE_PY_VENV   the environment (default .venv in the repository)
#   PY_EXTRAS=0         skip PyTorch and PyG (their tests are skipped then)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/deps.sh"
# scikit-build-core looks for CMake 3.28+ on PATH: put the one deps.sh chose
# first (the system's may be older).
PATH="$(dirname "$(command -v "$WARPSTORE_CMAKE")"):$PATH"
export PATH
venv=${WARPSTORE_PY_VENV:-$root/.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py=$venv/bin/python
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q nanobind scikit-build-core numpy pytest ninja
if [ "${PY_EXTRAS:-1}" = 1 ]; then
  # PyTorch from the package index (its Linux wheel runs on machines without a GPU).
  "$py" -m pip install -q torch torch_geometric
fi
gpu=OFF
if nvidia-smi -L >/dev/null 2>&1; then gpu=ON; fi
"$py" -m pip install -q --no-build-isolation --no-deps "$root" \
  -C cmake.define.WARPSTORE_GPU=$gpu -C build-dir="$root/build-python/{wheel_tag}-gpu$gpu"
# Run from outside the tree so the installed package is what gets imported.
cd "$root/python/tests"
"$py" -m pytest -q -p no:cacheprovider "$root/python/tests"
