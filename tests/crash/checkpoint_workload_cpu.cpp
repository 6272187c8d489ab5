// The checkpoint crash workload on the CPU target (std::threads as warps).
#include "apps/graph/launch.h"
#include "tests/crash/checkpoint_workload.cuh"

namespace warpstore::crash {

std::unique_ptr<workload> make_checkpoint_workload() {
  return std::make_unique<checkpoint_detail::checkpoint_workload<apps::cpu_launch>>(apps::cpu_launch{});
}

}  // namespace warpstore::crash
