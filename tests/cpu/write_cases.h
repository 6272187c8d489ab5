// The controller setups every write test runs against, for the CPU and GPU
// suites alike: the host controller with each delivery, the memory one, and
// the nvme one over the software NVMe device; and the fixture of the suites
// whose every test gets a fresh pattern file.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "test_files.h"
#include "warpstore/settings.h"

namespace warpstore::test {

struct write_case {
  controller_kind kind;
  delivery deliver;
};

inline auto write_cases() {
  return ::testing::Values(write_case{controller_kind::host, delivery::gpu_pull},
                           write_case{controller_kind::host, delivery::copy_engine},
                           write_case{controller_kind::memory, delivery::gpu_pull},
                           write_case{controller_kind::nvme_model, delivery::gpu_pull});
}

// A controller's name as a test name may spell it: "nvme-model" -> "nvme_model".
inline std::string controller_test_name(controller_kind k) {
  std::string n = to_string(k);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

// "host_pull", "host_copy", "memory", "nvme_model".
inline std::string write_case_name(const ::testing::TestParamInfo<write_case>& info) {
  return controller_test_name(info.param.kind) +
         (info.param.kind == controller_kind::host
              ? std::string("_") + to_string(info.param.deliver)
              : std::string());
}

// A suite over `Param` (a write_case, a controller) whose every test gets a
// fresh 8 MiB pattern file, file_.
template <class Param>
class pattern_file_suite : public ::testing::TestWithParam<Param> {
 protected:
  pattern_file file_{8 << 20};
};

}  // namespace warpstore::test
