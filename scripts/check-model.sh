#!/usr/bin/env bash
# Checks the Spin model of the submission/completion protocol
# (tests/model/queue_protocol.pml) for small queue depths, lane and command
# counts: no lost or doubled command, no deadlock. Prints the states each
# configuration explored and, last, "model total: N states". Needs spin and a
# C compiler (apt-get install spin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command -v spin >/dev/null || { echo "check-model: spin not found (apt-get install spin)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tests/model/queue_protocol.pml" "$work/"
cd "$work"
total=0
# depth lanes commands-per-lane; larger ones take minutes and gigabytes.
for cfg in "2 2 2" "2 2 3" "2 3 1" "4 2 2" "4 2 3"; do
  set -- $cfg
  spin -a -DD="$1" -DNLANES="$2" -DNCMDS="$3" queue_protocol.pml >/dev/null
  cc -O2 -DSAFETY -DCOLLAPSE -w -o pan pan.c
  out=$(timeout 600 ./pan -m1000000)
  if ! grep -q "errors: 0" <<<"$out"; then
    echo "$out"
    echo "check-model: depth $1, $2 lanes, $3 commands each: VIOLATION (trail above)" >&2
    exit 1
  fi
  states=$(awk '/states, stored/ {print $1; exit}' <<<"$out")
  echo "model depth $1, $2 lanes x $3 commands: $states states, no violation"
  total=$((total + states))
done
echo "model total: $total states"
