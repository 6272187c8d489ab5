#!/usr/bin/env bash
# Builds warpstore (installing what it can, saying what it cannot) and runs the
# demo: a multi-GB file, random elements gathered through a cache 1/8 its
# size, every one verified. On the GPU where there is one, else the CPU target.
# Extra arguments go to the demo (--help lists them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
source "$root/scripts/deps.sh"
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
"$WARPSTORE_CMAKE" -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
if nvidia-smi -L >/dev/null 2>&1 && grep -q 'WARPSTORE_GPU:BOOL=ON' "$build/CMakeCache.txt"; then
  "$WARPSTORE_CMAKE" --build "$build" -j "$(nproc)" --target warpstore-demo
  exec "$build/apps/warpstore-demo" "$@"
fi
echo "warpstore: no GPU here: running the demo on the CPU target" >&2
"$WARPSTORE_CMAKE" --build "$build" -j "$(nproc)" --target warpstore-demo-cpu
exec "$build/apps/warpstore-demo-cpu" "$@"
