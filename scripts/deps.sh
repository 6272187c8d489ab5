#!/usr/bin/env bash
# Installs what the build needs where it can (Debian/Ubuntu, as root), and says
# exactly what is missing where it cannot.
set -euo pipefail
missing=()
have_header() { [ -f "/usr/include/$1" ] || { [ -n "${LIBURING_ROOT:-}" ] && [ -f "$LIBURING_ROOT/include/$1" ]; }; }
have_header liburing.h || missing+=(liburing-dev)
have_header gtest/gtest.h || missing+=(libgtest-dev)
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; }
  else
    echo "warpstore: missing ${missing[*]}; install them (apt-get install ${missing[*]}) or set LIBURING_ROOT" >&2
    exit 1
  fi
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  echo "warpstore: no nvcc: building the CPU target only (the CUDA toolkit headers are still needed for libcu++)" >&2
exit 0
