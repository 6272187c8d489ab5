# Sourced by the build scripts: installs what the build needs where it can
# (Debian/Ubuntu as root; CMake from PyPI when the system one is older than
# 3.28, which CUDA C++20 needs), and says exactly what is missing where it
# cannot. Sets WARPSTORE_CMAKE and WARPSTORE_CTEST.
warpstore_deps() {
  local missing=()
  [ -f /usr/include/liburing.h ] || { [ -n "${LIBURING_ROOT:-}" ] && [ -f "$LIBURING_ROOT/include/liburing.h" ]; } ||
    missing+=(liburing-dev)
  [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  command -v g++ >/dev/null || missing+=(g++)
  command -v ninja >/dev/null || missing+=(ninja-build)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
        { echo "warpstore: could not install ${missing[*]} with apt-get" >&2; return 1; }
    else
      echo "warpstore: missing ${missing[*]}: install them (apt-get install ${missing[*]}), or set LIBURING_ROOT" >&2
      return 1
    fi
  fi
  WARPSTORE_CMAKE=cmake
  local v
  v=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}')
  if [ -z "$v" ] || [ "$(printf '%s\n3.28\n' "$v" | sort -V | head -1)" != 3.28 ]; then
    local venv=${WARPSTORE_TOOLS_VENV:-$HOME/.cache/warpstore-tools}
    if [ ! -x "$venv/bin/cmake" ]; then
      echo "warpstore: cmake ${v:-missing} is older than 3.28: installing CMake from PyPI into $venv" >&2
      python3 -m venv "$venv" && "$venv/bin/pip" install -q 'cmake>=3.28,<4' ||
        { echo "warpstore: could not install CMake 3.28+ (pip install 'cmake>=3.28')" >&2; return 1; }
    fi
    WARPSTORE_CMAKE=$venv/bin/cmake
  fi
  WARPSTORE_CTEST=$(dirname "$(command -v "$WARPSTORE_CMAKE")")/ctest
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    echo "warpstore: no nvcc: building the CPU target only (the CUDA toolkit headers are still needed for libcu++)" >&2
  export PATH=/usr/local/cuda/bin:$PATH
}
warpstore_deps
