# Shared start of the one-command GPU studies (scripts/gpu-writes.sh,
# gpu-durability*.sh). Source it with the study's name:
#
#   source "$(dirname "$0")/lib/gpu-study.sh" gpu-writes
#
# Sets root, out ($OUT or <root>/<name>-out), build ($BUILD_DIR or
# <root>/build-gpu), status=0 and exports WARPSTORE_COMMIT; defines
#   step TEXT                     a timed heading, also in summary.log
#   fail TEXT                     a failure: status=1, also in summary.log
#   machine_log                   GPU, cores, memory and disk into machine.log
#   gpu_build MINUTES TARGET...   configure (Release, sm_90) and build the
#                                 targets within MINUTES, or stop the script
study_name=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/$study_name-out}
mkdir -p "$out"
build=${BUILD_DIR:-$root/build-gpu}
status=0
export WARPSTORE_COMMIT=${WARPSTORE_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
start=$(date +%s)

step() { echo "== $1 ($(($(date +%s) - start)) s)" | tee -a "$out/summary.log" >&2; }
fail() {
  status=1
  echo "FAILED: $1" | tee -a "$out/summary.log" >&2
}
machine_log() {
  { nvidia-smi -L; nproc; free -g | head -2; df -h /tmp | tail -1; } >"$out/machine.log" 2>&1
}
gpu_build() {
  local seconds=$(($1 * 60))
  shift
  step build
  if ! { timeout 30 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DCMAKE_CUDA_ARCHITECTURES=90 -DWARPSTORE_WERROR=OFF &&
         timeout "$seconds" cmake --build "$build" -j 16 --target "$@"; } >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log" >&2
    echo "$study_name: build failed" | tee -a "$out/summary.log" >&2
    exit 1
  fi
}
