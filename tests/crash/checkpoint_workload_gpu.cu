// The checkpoint crash workload on the GPU: the bodies run as kernels of
// whole warps, four blocks of 256 threads per multiprocessor.
#include "tests/crash/checkpoint_workload.cuh"
#include "warpstore/cuda_check.h"

namespace warpstore::crash {

namespace {

template <class Body>
__global__ void workload_kernel(Body body) {
  const std::uint64_t thread = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  body(thread / 32, std::uint64_t{gridDim.x} * blockDim.x / 32);
}

struct gpu_launch {
  unsigned blocks = 0;
  template <class Body>
  void operator()(const Body& body) const {
    workload_kernel<Body><<<blocks, 256>>>(body);
    WARPSTORE_CHECK_LAUNCH();
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  }
};

}  // namespace

std::unique_ptr<workload> make_checkpoint_workload() {
  int device = 0, sms = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&device));
  WARPSTORE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::make_unique<checkpoint_detail::checkpoint_workload<gpu_launch>>(
      gpu_launch{static_cast<unsigned>(sms) * 4});
}

}  // namespace warpstore::crash
