// The key-value crash workload on the GPU (kv_workload.inl).
#include "apps/kvstore/gpu_launch.cuh"

namespace warpstore::crash {
using kv_launch = kv::gpu_launch;
}  // namespace warpstore::crash

#include "tests/crash/kv_workload.inl"
