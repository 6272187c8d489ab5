// Running an algorithm body (algorithms.cuh) over every warp of a launch on
// the CPU target: run_warps on std::threads, each a warp of one lane.
#pragma once

#if defined(__CUDACC__)
#error "apps/graph/launch.h is the CPU target's: code compiled by nvcc uses gpu_launch.cuh"
#endif

#include <cstdint>

#include "warpstore/launch.cuh"

namespace warpstore::apps {

struct cpu_launch {
  std::uint64_t warps = 0;  // asked for, at most cpu_warps() (0: cpu_warps())

  template <class Body>
  void operator()(const Body& body) const {
    run_warps(warps, body);
  }
};

}  // namespace warpstore::apps
