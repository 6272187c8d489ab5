// Running a key-value store body (kvstore.cuh) on the CPU target: run_warps
// on at most cpu_warps() std::threads, each a warp of one lane.
#pragma once

#if defined(__CUDACC__)
#error "apps/kvstore/launch.h is the CPU target's: code compiled by nvcc uses gpu_launch.cuh"
#endif

#include <cstdint>

#include "warpstore/launch.cuh"

namespace warpstore::kv {

struct cpu_launch {
  static std::uint64_t max_warps() { return cpu_warps(); }

  template <class Body>
  void operator()(std::uint64_t warps, const Body& body) const {
    run_warps(warps, body);
  }
};

}  // namespace warpstore::kv
