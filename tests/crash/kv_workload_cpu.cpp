// The key-value crash workload on the CPU target (kv_workload.inl).
#include "apps/kvstore/launch.h"

namespace warpstore::crash {
using kv_launch = kv::cpu_launch;
}  // namespace warpstore::crash

#include "tests/crash/kv_workload.inl"
