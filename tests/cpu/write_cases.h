// The controller setups every write test runs against, for the CPU and GPU
// suites alike: the host controller with each delivery, and the memory one.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "warpstore/settings.h"

namespace warpstore::test {

struct write_case {
  controller_kind kind;
  delivery deliver;
};

inline auto write_cases() {
  return ::testing::Values(write_case{controller_kind::host, delivery::gpu_pull},
                           write_case{controller_kind::host, delivery::copy_engine},
                           write_case{controller_kind::memory, delivery::gpu_pull});
}

// "host_pull", "host_copy", "memory".
inline std::string write_case_name(const ::testing::TestParamInfo<write_case>& info) {
  return std::string(to_string(info.param.kind)) +
         (info.param.kind == controller_kind::host
              ? std::string("_") + to_string(info.param.deliver)
              : std::string());
}

}  // namespace warpstore::test
