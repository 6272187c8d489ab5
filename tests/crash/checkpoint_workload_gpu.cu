// The checkpoint crash workload on the GPU: the bodies run as kernels of
// whole warps, four blocks of 256 threads per multiprocessor.
#include "apps/graph/gpu_launch.cuh"
#include "tests/crash/checkpoint_workload.cuh"
#include "warpstore/runtime.h"

namespace warpstore::crash {

std::unique_ptr<workload> make_checkpoint_workload() {
  return std::make_unique<checkpoint_detail::checkpoint_workload<apps::gpu_launch>>(
      apps::gpu_launch{runtime::processor_count() * 4});
}

}  // namespace warpstore::crash
