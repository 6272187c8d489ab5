// Running a key-value store body (kvstore.cuh) on the GPU: exactly `warps`
// warps, one per block of 32 threads, called as body(warp, warps); waits and
// raises what the launch or the kernel hit.
#pragma once

#include <cstdint>

#include "warpstore/cuda_check.h"

namespace warpstore::kv {

template <class Body>
__global__ void kv_kernel(Body body) {
  body(blockIdx.x, gridDim.x);
}

struct gpu_launch {
  static constexpr std::uint64_t max_warps = 1u << 16;

  template <class Body>
  void operator()(std::uint64_t warps, const Body& body) const {
    kv_kernel<Body><<<static_cast<unsigned>(warps == 0 ? 1 : warps), 32>>>(body);
    WARPSTORE_CUDA_TRY(cudaGetLastError());
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  }
};

}  // namespace warpstore::kv
