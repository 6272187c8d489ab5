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
#   gpu_build MINUTES TARGET...   configure (Release, sm_90, plus
#                                 $GPU_CMAKE_ARGS) and build the targets
#                                 within MINUTES, or stop the script
#   timed NAME SECONDS CMD...     CMD under a timeout, its output in
#                                 $out/NAME.log (the tail shown), a failure
#                                 recorded with fail; with PACK=FILE every
#                                 log so far is packed into FILE after it
#   vector_add_run JSON NAME CONTROLLER TRIALS THREADS LOG [WORD...]
#                                 one `warpstore-bench writes` result (the
#                                 issue-4 vector add, 1 GiB arrays, 512 MiB
#                                 cache) merged into JSON, its output in
#                                 $out/LOG; each WORD is a WARPSTORE_*=VALUE
#                                 setting for warpstore's side or an option
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
           -DCMAKE_CUDA_ARCHITECTURES=90 -DWARPSTORE_WERROR=OFF ${GPU_CMAKE_ARGS:-} &&
         timeout "$seconds" cmake --build "$build" -j 16 --target "$@"; } >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log" >&2
    echo "$study_name: build failed" | tee -a "$out/summary.log" >&2
    exit 1
  fi
}
timed() {
  local name=$1 limit=$2
  shift 2
  step "$name (up to $limit s)"
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  # PACK=FILE: the logs so far, packed after every step (a call cut short
  # still brings them back).
  [ -z "${PACK:-}" ] || tar czf "$PACK" -C "$out" . 2>/dev/null
  [ $rc = 0 ] || fail "$name (exit $rc$([ $rc = 124 ] && echo ', timed out'))"
  tail -15 "$out/$name.log" >&2
  return $rc
}
vector_add_run() {
  local json=$1 name=$2 controller=$3 trials=$4 threads=$5 log=$6 word
  shift 6
  local envs=() opts=()
  for word in "$@"; do
    if [[ $word == WARPSTORE_*=* ]]; then envs+=("$word"); else opts+=("$word"); fi
  done
  env "${envs[@]}" timeout 150 "$build/bench/warpstore-bench" writes --json "$json" \
    --file /tmp/warpstore-writes.dat --file-size 2GiB --elements 128M --cache-bytes 512MiB \
    --controller "$controller" --service-threads "$threads" --direct off --repeat "$trials" \
    --name "$name" "${opts[@]}" >"$out/$log" 2>&1
}
