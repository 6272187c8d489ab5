#!/usr/bin/env bash
# The one command of the GPU machine, from the checkout (no network there):
#
#   source .deps/unpack-deps.sh; scripts/gpu.sh STUDY [STEP...]
#
# Builds what the study needs (build-gpu, Release, sm_90) and runs its steps,
# each under a timeout; a failed step is logged and the next one runs; the
# exit status says whether all passed. Results JSON go where each study says
# (most merge into bench/results/*.json, copied to the logs); logs,
# summary.log and machine.log go to $OUT (default artifacts/STUDY,
# git-ignored), packed into $OUT/logs.tar.gz after every step.
#
# Studies and their steps (no STEP, or `all`: every step; each study's file,
# scripts/studies/STUDY.sh, says what its steps run). `scripts/gpu.sh` alone
# lists them.
#
# The device tool returns only a few files from $OUT: PACK=1 leaves just
# summary.log and results.tar.gz (everything the study wrote) there at the end.
#
# Environment: OUT, PACK, BUILD_DIR (default build-gpu), BUDGET (seconds for the
# whole study, where it has one), GPU_CMAKE_ARGS (CMake arguments added to this
# tree's build, e.g. -DWARPSTORE_COLD_OUT_OF_LINE=ON; not to an A/B's base
# tree), WARPSTORE_COMMIT (the
# commit the results name; default HEAD), PYTHON (default python3), and each
# study's own (its file lists them).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
studies=$root/scripts/studies

usage() {
  echo "usage: scripts/gpu.sh STUDY [STEP...]" >&2
  echo "studies (steps):" >&2
  local f
  for f in "$studies"/*.sh; do
    (
      # shellcheck source=/dev/null
      source "$f"
      printf '  %-12s %s\n' "$(basename "$f" .sh)" "$study_summary" >&2
      [ -z "$study_steps" ] || printf '  %-12s steps: %s\n' "" "$study_steps" >&2
    )
  done
  exit 2
}

if [ $# -lt 1 ] || [ ! -f "$studies/$1.sh" ]; then usage; fi
study=$1
shift
study_steps="" study_budget="" study_summary=""
# shellcheck source=/dev/null
source "$studies/$study.sh"
steps=" ${*:-all} "
for s in $steps; do
  if [ "$s" != all ] && [[ " $study_steps " != *" $s "* ]]; then
    echo "scripts/gpu.sh $study: no step '$s' (steps: ${study_steps:-none, the study runs whole})" >&2
    exit 2
  fi
done
source "$root/scripts/lib/steps.sh"
# Competitors' wheels carried in .whl (scripts/fetch-wheels.sh): KvikIO.
if compgen -G "$root/.whl/*.whl" >/dev/null; then
  ${PYTHON:-python3} -m pip install -q --no-deps --no-index --target /tmp/warpstore-wheels \
    "$root"/.whl/*.whl >&2 && export PYTHONPATH=/tmp/warpstore-wheels${PYTHONPATH:+:$PYTHONPATH}
fi
steps_init "$study"
cd "$root" || exit 1
"study_${study//-/_}"
step "done (status $status)"
if [ "${PACK:-0}" = 1 ]; then
  tar -C "$out" -czf "/tmp/results-$$.tar.gz" --exclude=logs.tar.gz . &&
    find "$out" -mindepth 1 ! -name summary.log -delete &&
    mv "/tmp/results-$$.tar.gz" "$out/results.tar.gz"
fi
exit $status
