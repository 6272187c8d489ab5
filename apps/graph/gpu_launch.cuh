// Running an algorithm body (algorithms.cuh) over every warp of a GPU launch:
// run_warps on `blocks` blocks of whole warps (the bodies' warp sums assume
// all 32 lanes take part); it waits and raises what the kernel hit.
#pragma once

#if !defined(__CUDACC__)
#error "apps/graph/gpu_launch.cuh launches kernels: include it from code compiled by nvcc"
#endif

#include <cstdint>

#include "warpstore/launch.cuh"

namespace warpstore::apps {

// The graph bench builds with WARPSTORE_GRAPH_MAX_REGISTERS=128 and the rare
// branches out of line (apps/CMakeLists.txt); the other programs that
// launch with this (taxi, pagerank) are not capped.
#ifndef WARPSTORE_GRAPH_MAX_REGISTERS
#define WARPSTORE_GRAPH_MAX_REGISTERS 0
#endif

struct gpu_launch {
  unsigned blocks = 0;  // 0: enough to fill every multiprocessor
  static constexpr unsigned block_threads = 256;
  // Registers a lane (run_warps<R>; 0: no cap): the bodies over the cache
  // inline its read path, which left alone takes 246 to 255 registers, so an
  // SM holds 8 of their warps, too few for bodies whose every edge waits on
  // lookups in L2.
  static constexpr unsigned max_registers = WARPSTORE_GRAPH_MAX_REGISTERS;

  template <class Body>
  void operator()(const Body& body) const {
    run_warps<max_registers>(std::uint64_t{blocks} * (block_threads / 32), body, block_threads);
  }
};

}  // namespace warpstore::apps
