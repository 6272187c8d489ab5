#!/usr/bin/env bash
# Run once on a machine with Debian's packages, in the checkout: puts what the
# GPU machine lacks (liburing, GoogleTest) into .deps/ (git-ignored), to be
# carried there and unpacked with `source .deps/unpack-deps.sh`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
sh ../shared/device/fetch-deps.sh >/dev/null
cd .deps
[ -n "$(ls libgtest-dev_*.deb 2>/dev/null)" ] || apt-get download libgtest-dev 2>/dev/null ||
  { apt-get update -qq && apt-get download libgtest-dev; }
ls -l
