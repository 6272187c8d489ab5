// Running an algorithm body (algorithms.cuh) over every warp of a GPU launch.
#pragma once

#include <cstdint>

#include "support/gpu.cuh"

namespace warpstore::apps {

template <class Body>
__global__ void warp_kernel(Body body) {
  const std::uint64_t thread = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  body(thread / 32, std::uint64_t{gridDim.x} * blockDim.x / 32);
}

// Whole warps only: the bodies' warp sums assume all 32 lanes take part.
struct gpu_launch {
  unsigned blocks = 0;  // 0: enough to fill every multiprocessor
  static constexpr unsigned block_threads = 256;

  template <class Body>
  void operator()(const Body& body) const {
    const unsigned grid = blocks ? blocks : bench::resident_blocks(&warp_kernel<Body>, block_threads);
    warp_kernel<Body><<<grid, block_threads>>>(body);
    bench::check_launch("graph kernel");
  }
};

}  // namespace warpstore::apps
