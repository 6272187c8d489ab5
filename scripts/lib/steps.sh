# The step helper of scripts/gpu.sh, sourced by it before it runs a study
# (scripts/studies/STUDY.sh). `steps_init STUDY` sets:
#
#   root    the checkout
#   out     $OUT, else artifacts/STUDY in the checkout (git-ignored): every
#           step's log, summary.log, machine.log, copies of the results JSON,
#           and logs.tar.gz holding all of them
#   build   $BUILD_DIR, else build-gpu in the checkout
#   status  0 until something fails; gpu.sh exits with it
#   budget  $BUDGET, else the study's study_budget (seconds from the start
#           for the whole study; empty: no budget, only each step's limit)
#   WARPSTORE_COMMIT (exported) the commit the results name: as given (the
#           device's copy of the tree may carry a stale .git), else HEAD
#
# and defines:
#
#   want STEP                    whether the command line named STEP (or all)
#   step TEXT                    a timed heading, also in summary.log
#   fail TEXT                    a failure: status=1, also in summary.log
#   left                         seconds of the budget left
#   machine_log                  GPU, driver, cores, memory, disks and commit
#                                into machine.log (a study may append more)
#   gpu_build MINUTES TARGET...  configure (Release, sm_90, plus
#                                $GPU_CMAKE_ARGS) and build the targets within
#                                MINUTES, or stop the study
#   timed NAME MAX[/MIN] CMD...  CMD under a timeout of MAX seconds (less when
#                                the budget has less left; skipped when less
#                                than MIN, default 10, is left), its output in
#                                $out/NAME.log, the tail shown; a failure
#                                recorded with fail. Returns CMD's status, or
#                                125 when skipped (a failure only where the
#                                study sets skip_fails=1).
#   gpu_tests LOG [TEST...]      each GPU test binary (build-gpu/tests/gpu;
#                                none named: every one built, the binaries
#                                behind ctest -L gpu) under a timeout, all
#                                into $out/LOG, the verdicts into summary.log
#   pack_logs                    everything in $out into $out/logs.tar.gz:
#                                after every timed step and on exit, so a
#                                call cut short still brings the logs back
#
# Study settings, read by the functions: tail_lines (lines of a passing
# step's log shown, default 15; a failing step shows 15 or more),
# skip_fails.

steps_init() {
  study_name=$1
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  out=${OUT:-$root/artifacts/$study_name}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  build=${BUILD_DIR:-$root/build-gpu}
  budget=${BUDGET:-${study_budget:-}}
  status=0
  start=$SECONDS
  tail_lines=${tail_lines:-15}
  skip_fails=${skip_fails:-0}
  if [ -n "${WARPSTORE_COMMIT:-}" ]; then
    commit_from=WARPSTORE_COMMIT
  else
    WARPSTORE_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
    commit_from="git rev-parse HEAD (WARPSTORE_COMMIT not set: may be stale)"
    # Tracked files that differ from HEAD: changes not committed, or (on the
    # GPU machine) this tree copied over an older .git. The results say so.
    if [ "$WARPSTORE_COMMIT" != unknown ] &&
       [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
      WARPSTORE_COMMIT=$WARPSTORE_COMMIT+dirty
      commit_from="$commit_from; the tree differs from it"
    fi
  fi
  export WARPSTORE_COMMIT
  : >"$out/summary.log"
  echo "$study_name: commit $WARPSTORE_COMMIT from $commit_from; logs in $out" |
    tee -a "$out/summary.log" >&2
  trap pack_logs EXIT
}

want() { [[ $steps == *" all "* || $steps == *" $1 "* ]]; }

left() {
  if [ -n "$budget" ]; then echo $((budget - (SECONDS - start))); else echo 1000000; fi
}

step() { echo "== $1 ($((SECONDS - start)) s)" | tee -a "$out/summary.log" >&2; }

fail() {
  status=1
  echo "FAILED: $1" | tee -a "$out/summary.log" >&2
}

pack_logs() {
  # A temporary name, then a rename: steps running at once may pack together.
  local tmp="$out/.logs.$BASHPID.tar.gz"
  tar czf "$tmp" -C "$out" --exclude=logs.tar.gz --exclude='.logs.*' . 2>/dev/null &&
    mv -f "$tmp" "$out/logs.tar.gz"
  rm -f "$tmp"
}

machine_log() {
  {
    date -u
    nvidia-smi -L
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    nproc
    free -g | head -2
    df -h /tmp "$root" | tail -2
    echo "commit $WARPSTORE_COMMIT"
  } >"$out/machine.log" 2>&1
}

gpu_build() {
  local seconds=$(($1 * 60))
  shift
  step "build: $*"
  # shellcheck disable=SC2086 # GPU_CMAKE_ARGS is a list of words
  if ! { timeout 60 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DCMAKE_CUDA_ARCHITECTURES=90 -DWARPSTORE_WERROR=OFF ${GPU_CMAKE_ARGS:-} &&
         timeout "$seconds" cmake --build "$build" -j "$(nproc)" --target "$@"; } >>"$out/build.log" 2>&1; then
    tail -40 "$out/build.log" >&2
    echo "$study_name: build failed" | tee -a "$out/summary.log" >&2
    status=1
    exit 1
  fi
}

timed() {
  local name=$1 limit=${2%/*} min=10 l rc s0
  [[ $2 == */* ]] && min=${2#*/}
  shift 2
  l=$(($(left) - 5))
  if [ "$l" -lt "$min" ]; then
    echo "== $name: skipped, $l s of the budget left (needs $min s)" | tee -a "$out/summary.log" >&2
    [ "$skip_fails" = 1 ] && status=1
    return 125
  fi
  [ "$l" -lt "$limit" ] && limit=$l
  step "$name (up to $limit s)"
  s0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "   $name: exit $rc after $((SECONDS - s0)) s" >>"$out/summary.log"
  if [ $rc != 0 ]; then
    fail "$name (exit $rc$([ $rc = 124 ] && echo ', timed out'))"
    tail -"$((tail_lines > 15 ? tail_lines : 15))" "$out/$name.log" >&2
  elif [ "$tail_lines" -gt 0 ]; then
    tail -"$tail_lines" "$out/$name.log" >&2
  fi
  pack_logs
  return $rc
}

gpu_tests() {
  local log=$1 t bin
  shift
  # shellcheck disable=SC2046 # test names have no spaces
  [ $# -gt 0 ] || set -- $(cd "$build/tests/gpu" && ls gpu_*_test)
  step "GPU tests: $*"
  for t in "$@"; do
    bin=$build/tests/gpu/$t
    echo "-- $bin" >>"$out/$log"
    timeout 150 "$bin" >>"$out/$log" 2>&1 || fail "$t (exit $?)"
  done
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/$log" | tee -a "$out/summary.log" >&2
  pack_logs
}
