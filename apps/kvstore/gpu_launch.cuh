// Running a key-value store body (kvstore.cuh) on the GPU: run_warps on
// exactly the warps asked for (blocks of 256 threads: the bodies use no
// block-wide state); it waits and raises what the launch or the kernel hit.
#pragma once

#if !defined(__CUDACC__)
#error "apps/kvstore/gpu_launch.cuh launches kernels: include it from code compiled by nvcc"
#endif

#include <cstdint>

#include "warpstore/launch.cuh"

namespace warpstore::kv {

struct gpu_launch {
  static std::uint64_t max_warps() { return std::uint64_t{1} << 16; }

  template <class Body>
  void operator()(std::uint64_t warps, const Body& body) const {
    run_warps(warps, body);
  }
};

}  // namespace warpstore::kv
