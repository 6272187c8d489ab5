#!/usr/bin/env bash
# The dependency graph of the tree, checked on the includes:
#   include/, src/ (the library)  <-  support/  <-  bench/, tools/, apps/  <-  tests/
# The library includes none of the others; support/ only the library; bench/,
# tools/ and apps/ the library and support/, never each other; tests/ may
# include anything. Prints every include that breaks it and exits 1.
#   tests/layout/check_includes.sh [ROOT]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
status=0
# check DIR FORBIDDEN...: no source under DIR includes "FORBIDDEN/...".
check() {
  local dir=$1 pattern
  shift
  pattern=$(IFS='|'; echo "$*")
  if grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"($pattern)/" "$dir" \
       --include='*.h' --include='*.cuh' --include='*.hpp' --include='*.cpp' --include='*.cu' \
       --include='*.inl'; then
    echo "check_includes: $dir includes from $* (above)" >&2
    status=1
  fi
}
check include support bench tools apps tests python
check src support bench tools apps tests python
check support bench tools apps tests python
check bench tools apps tests python
check tools bench apps tests python
check apps bench tools tests python
exit $status
