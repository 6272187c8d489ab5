#!/usr/bin/env bash
# Bisects the intermittent wrong answers of warpstore-taxi (further columns
# read by the divergent selected lanes, column-0 line pinned, six arrays and
# six host controllers sharing one cache) in one command on the GPU machine:
#
#   source .deps/unpack-deps.sh; scripts/gpu-taxi-bisect.sh
#
# Builds warpstore-taxi, warpstore-taxi-ungrouped (the same program with
# array_ref grouping its callers by __activemask() alone, as before the fix
# in array_ref::calling_mask) and warpstore-taxigen only (build-gpu,
# Release, sm_90), generates a small zone table ($TAXI_ROWS, default 64M
# rows) under $DATA, then runs Q5 at 1 % and 10 % with 4 KiB lines (the
# failing taxi-line4k set-up: queue depth 256), each warpstore query
# $REPEAT times, once per variant (most telling first):
#
#   ungrouped-operator     the bug as the study hit it (expected WRONG)
#   fixed-operator         the same with the fix (expected right)
#   ungrouped-converged    all lanes call read_masked(mask, selected, i) together
#                          (one array per call: expected right)
#   ungrouped-q1           Q1 only: one further column, so no lanes of two
#                          arrays can meet (expected right, as the diagnosis saw)
#   ungrouped-memory       the memory controller (expected WRONG: each lane
#                          copies from its own array's host copy)
#   ungrouped-released     column-0 line unpinned before the further reads
#                          (the pin is not the cause: expected WRONG, maybe rarer)
#   ungrouped-cache-per-column  one cache per column (expected WRONG)
#   fixed-memory, fixed-converged, fixed-cache-per-column  (expected right)
#
# One line per variant on stdout: "variant: right", "variant: WRONG (...)",
# "variant: FAILED (exit N)" or "skipped (budget)". Everything inside
# $BUDGET seconds (default 150) counted from the start; every binary under
# `timeout`. Logs: $OUT/gpu-taxi-bisect-logs.tar.gz (and summary.txt).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-taxi-bisect-out}
data=${DATA:-/tmp/warpstore-bisect}
build=${BUILD_DIR:-$root/build-gpu}
budget=${BUDGET:-150}
rows=${TAXI_ROWS:-64M}
repeat=${REPEAT:-3}
mkdir -p "$out" "$data"
start=$(date +%s)
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-taxi-bisect-logs.XXXXXX")
pack() {
  cp "$logs/summary.txt" "$out/" 2>/dev/null
  tar -czf "$out/gpu-taxi-bisect-logs.tar.gz" -C "$logs" . && rm -rf "$logs"
  rm -rf "$data/taxi"
}
trap pack EXIT
git rev-parse HEAD >"$logs/commit.txt" 2>&1

left() { echo $((budget - ($(date +%s) - start))); }

# step NAME MAX MIN COMMAND...: COMMAND under timeout min(MAX, left - 3),
# logged to $logs/NAME.log; returns 125 (skipped) when less than MIN is left.
step() {
  local name=$1 max=$2 min=$3
  shift 3
  local l=$(($(left) - 3))
  if [ "$l" -lt "$min" ]; then
    echo "== $name: skipped, ${l}s left" >>"$logs/steps.log"
    return 125
  fi
  local t=$((max < l ? max : l)) s0
  s0=$(date +%s)
  timeout --kill-after=5 "$t" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $(($(date +%s) - s0))s (timeout ${t}s)" >>"$logs/steps.log"
  return $rc
}

report() { echo "$*" | tee -a "$logs/summary.txt"; }

step configure 40 10 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 || { report "configure: FAILED"; tail -20 "$logs/configure.log"; exit 1; }
step build 100 20 cmake --build "$build" -j 16 --target warpstore-taxi warpstore-taxi-ungrouped \
  warpstore-taxigen ||
  { report "build: FAILED"; tail -30 "$logs/build.log"; exit 1; }
bin=$build/apps
step gen 30 5 "$bin/warpstore-taxigen" "$data/taxi" --rows "$rows" --layout zone --threads 16 ||
  { report "gen: FAILED"; tail -20 "$logs/gen.log"; exit 1; }

# variant NAME BINARY QUERY SELECTIVITY FLAGS...: Q<QUERY> at SELECTIVITY and
# Q5 at 10 %, 4 KiB lines, $REPEAT warpstore runs per query.
variant() {
  local name=$1 binary=$2 query=$3 sel=$4
  shift 4
  step "$name" 25 8 "$bin/$binary" "$data/taxi" --layout zone --queries "$query" \
    --query-selectivity "$sel" --sweep 0.1 --line-size 4K --queue-depth 256 --repeat "$repeat" \
    --diagnose off --threads 16 --json "" "$@"
  local rc=$? log="$logs/$name.log"
  if [ $rc -eq 125 ]; then
    report "$name: skipped (budget)"
  elif grep -q "answer WRONG" "$log"; then
    local sides
    sides=$(grep -o "[a-z ]* answer WRONG" "$log" | sed 's/ answer WRONG//; s/^ *//' | sort | uniq -c |
      awk '{n=$1; $1=""; printf "%s%s x%d", (c++ ? ", " : ""), substr($0, 2), n}')
    report "$name: WRONG ($sides; of $((2 * repeat)) warpstore runs)"
  elif [ $rc -eq 0 ]; then
    report "$name: right"
  else
    report "$name: FAILED (exit $rc$([ $rc -eq 124 ] && echo ", timeout"))"
    tail -5 "$log" >&2
  fi
}

old=warpstore-taxi-ungrouped
new=warpstore-taxi
variant ungrouped-operator $old 5 0.01 --further-read operator
variant fixed-operator $new 5 0.01 --further-read operator
variant ungrouped-converged $old 5 0.01 --further-read converged
# Q1 at 10 % only (the sweep's 10 % equals the selectivity, so it is not rerun).
variant ungrouped-q1 $old 1 0.1 --further-read operator
variant ungrouped-memory $old 5 0.01 --further-read operator --controller memory
variant ungrouped-released $old 5 0.01 --further-read released
variant ungrouped-cache-per-column $old 5 0.01 --further-read operator --cache-per-column
variant fixed-memory $new 5 0.01 --further-read operator --controller memory
variant fixed-converged $new 5 0.01 --further-read converged
variant fixed-cache-per-column $new 5 0.01 --further-read operator --cache-per-column
echo "total $(($(date +%s) - start))s" | tee -a "$logs/summary.txt"
