# scripts/gpu.sh writes-tune: tuning runs of the write-heavy vector add
# (about 3 minutes, build included), none of them written to
# durability.json: their results go to $OUT/tune.json, named variant.N.
# Each variant is a line of extra `warpstore-bench writes` options (and
# WARPSTORE_*=VALUE settings for warpstore's side) in VARIANTS, one per line
# (default: 4 and 8 service threads per controller, and C over O_DIRECT),
# REPEAT alternating trials each (default 3). Every trial checks C word by
# word, both sides.
# shellcheck source=scripts/studies/writes.sh
source "$(dirname "${BASH_SOURCE[0]}")/writes.sh"  # vector_add_run
study_summary="vector-add variants (VARIANTS, REPEAT) into \$OUT/tune.json"
study_steps=""

study_writes_tune() {
  machine_log
  gpu_build 4 warpstore-bench
  local default_variants='--service-threads 4
--service-threads 8
--service-threads 4 --output-direct on'
  local variants=${VARIANTS:-$default_variants} repeat=${REPEAT:-3} i=0 v
  while IFS= read -r v; do
    [ -n "$v" ] || continue
    i=$((i + 1))
    step "vector add vs tiled, variant $i: $v"
    # shellcheck disable=SC2086 # a variant is a list of words
    vector_add_run "$out/tune.json" "variant.$i" host "$repeat" 4 "variant-$i" $v
  done <<<"$variants"
  rm -f /tmp/warpstore-writes.dat.out
}
