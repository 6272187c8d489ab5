#!/usr/bin/env bash
# ctest driver: install the build tree into a scratch prefix, build the
# consumer against it, run it.  run.sh CMAKE BUILD_DIR SOURCE_DIR SCRATCH
set -euo pipefail
cmake=$1 build=$2 src=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
"$cmake" --install "$build" --prefix "$scratch/prefix" >/dev/null
"$cmake" -S "$src" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
"$cmake" --build "$scratch/build" >/dev/null
"$scratch/build/consumer" "$scratch/data.bin"
