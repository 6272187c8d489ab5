#!/usr/bin/env bash
# Tuning runs of the write-heavy vector add (issue 4) in one command, on the
# GPU machine, from the checkout (about 3 minutes, build included):
#
#   source .deps/unpack-deps.sh; scripts/gpu-writes-tune.sh
#
# Builds warpstore-bench and runs the vector add against the tiled baseline
# once per variant, none of them written to durability.json: their results
# go to $OUT/tune.json, named variant.N:
# each variant is a line of extra `warpstore-bench writes` options (and
# WARPSTORE_*=VALUE settings for warpstore's side) in VARIANTS, one per line
# (default: 4 and 8 service threads per controller, and C over O_DIRECT),
# REPEAT alternating trials each (default 3). Every trial checks C word by
# word, both sides. Logs go to $OUT.
set -uo pipefail
source "$(dirname "$0")/lib/gpu-study.sh" gpu-writes-tune
machine_log
gpu_build 4 warpstore-bench
default_variants='--service-threads 4
--service-threads 8
--service-threads 4 --output-direct on'
variants=${VARIANTS:-$default_variants}
repeat=${REPEAT:-3}
i=0
while IFS= read -r v; do
  [ -n "$v" ] || continue
  i=$((i + 1))
  step "vector add vs tiled, variant $i: $v"
  # shellcheck disable=SC2086 # a variant is a list of words
  vector_add_run "$out/tune.json" "variant.$i" host "$repeat" 4 "variant-$i.log" $v ||
    fail "variant $i: $v (exit $?)"
  tail -4 "$out/variant-$i.log" | tee -a "$out/summary.log" >&2
done <<<"$variants"
rm -f /tmp/warpstore-writes.dat.out
step "done (status $status)"
exit $status
