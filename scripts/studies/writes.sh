# scripts/gpu.sh writes: the write path on the GPU (about 6 minutes, build
# included; the steps' timeouts add up to about 25 minutes, for a stuck one).
#
# Runs the whole GPU suite (among it the write tests: 1 M threads storing
# through a cache 1/16 of the data, both controllers, both deliveries, file
# verified: gpu-tests.log), and the write-heavy vector add against the tiled
# baseline (host controller as configured by default, 11 alternating trials
# each side; 11 with 8 service threads per controller; 7 over an output
# whose blocks exist (--overwrite); then, 3 trials each, without its
# write-behind, without eager write-back, without overlapped eviction,
# without both of those, then the memory controller), which merges
# write.vectoradd.vs_tiled into bench/results/durability.json (copied to
# $OUT). Also a step of `scripts/gpu.sh durability`.
study_summary="write tests, the write-heavy vector add (durability.json)"
study_steps=""

# vector_add_run JSON NAME CONTROLLER TRIALS THREADS LOG [WORD...]: one
# `warpstore-bench writes` result (the vector add, 1 GiB arrays, 512 MiB
# cache) merged into JSON, its output in $out/LOG; each WORD is a
# WARPSTORE_*=VALUE setting for warpstore's side or an option.
vector_add_run() {
  local json=$1 name=$2 controller=$3 trials=$4 threads=$5 log=$6 word
  shift 6
  local envs=() opts=()
  for word in "$@"; do
    if [[ $word == WARPSTORE_*=* ]]; then envs+=("$word"); else opts+=("$word"); fi
  done
  timed "$log" 150 env "${envs[@]}" "$build/bench/warpstore-bench" writes --json "$json" \
    --file /tmp/warpstore-writes.dat --file-size 2GiB --elements 128M --cache-bytes 512MiB \
    --controller "$controller" --service-threads "$threads" --direct off --repeat "$trials" \
    --name "$name" "${opts[@]}"
}

study_writes() {
  machine_log
  gpu_build 4 gpu_array_write_test gpu_array_read_test gpu_checkpoint_test gpu_log_test gpu_queue_test \
    warpstore-bench
  gpu_tests gpu-tests.log

  local json=$root/bench/results/durability.json
  # vector_add TITLE LOG NAME CONTROLLER TRIALS THREADS [WORD...]: one
  # vector-add result, THREADS service threads per host controller. The
  # input and the output array each have a host controller, with the
  # library's default of 4 service threads: with the write thread and the
  # write-behind thread that is 10 busy threads on the 16 cores. (With 8
  # each, 18 threads fight over 16 cores, the write thread, which bounds the
  # kernel, among them: 0.977 against 1.224 with 4, 11 trials each, same
  # lease, 2026-11-25.)
  vector_add() {
    local title=$1 log=$2
    shift 2
    step "vector add vs tiled ($title)"
    vector_add_run "$json" "$1" "$2" "$3" "$4" "$log" "${@:5}"
  }
  vector_add "host controller" bench-writes write.vectoradd.vs_tiled host 11 4
  vector_add "host controller, 8 service threads each" bench-writes-threads8 \
    write.vectoradd.threads8.vs_tiled host 11 8
  vector_add "host controller, output overwritten" bench-writes-overwrite \
    write.vectoradd.overwrite.vs_tiled host 7 4 --overwrite
  vector_add "host controller, no write-behind" bench-writes-no-write-behind \
    write.vectoradd.no_write_behind.vs_tiled host 3 4 WARPSTORE_WRITE_BEHIND_BYTES=0
  vector_add "host controller, no eager write-back" bench-writes-no-eager \
    write.vectoradd.no_eager_write_back.vs_tiled host 3 4 WARPSTORE_EAGER_WRITE_BACK=0
  vector_add "host controller, no overlapped eviction" bench-writes-no-overlap \
    write.vectoradd.no_overlapped_eviction.vs_tiled host 3 4 WARPSTORE_OVERLAPPED_EVICTION=0
  vector_add "host controller, no eager write-back, no overlapped eviction" bench-writes-no-eager-no-overlap \
    write.vectoradd.no_eager_no_overlap.vs_tiled host 3 4 WARPSTORE_EAGER_WRITE_BACK=0 WARPSTORE_OVERLAPPED_EVICTION=0
  vector_add "memory controller" bench-writes-memory write.vectoradd.memory.vs_tiled memory 3 4

  cp "$json" "$out/" 2>/dev/null
  rm -f /tmp/warpstore-writes.dat.out
}
