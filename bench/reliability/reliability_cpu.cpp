// warpstore-reliability-cpu: the reliability study on the CPU target, where
// a "warp" is one std::thread (see detail/platform.cuh).
#include <filesystem>
#include <thread>

#include "bench/reliability/cpu_reader.h"
#include "support/pattern_file.h"

namespace warpstore::reliability {
namespace {

// The CPU's extra part: the mixed read/write soak, sized for CI.
std::vector<bench::result> cpu_parts(const bench::parsed_args& args) {
  std::vector<bench::result> out;
  rw_setup s = rw_setup_from(args, "cpu");
  if (s.file_bytes == 0) return out;
  tools::write_pattern_file(s.path, s.file_bytes, 0, 2, {}, false);
  try {
    out.push_back(run_soak_readwrite(s, default_rw_parts(), cpu_rw_launcher()));
  } catch (...) {
    std::filesystem::remove(s.path);
    throw;
  }
  std::filesystem::remove(s.path);
  return out;
}

}  // namespace
}  // namespace warpstore::reliability

int main(int argc, char** argv) {
  using namespace warpstore::reliability;
  return study_main(argc, argv, "warpstore-reliability-cpu", [] {
    target t;
    t.name = "cpu";
    t.device = "CPU target (std::thread lanes)";
    t.read = read_on_threads;
    t.write = write_on_threads;
    t.extra = cpu_parts;
    t.extra_options = [](warpstore::bench::command_spec& c) {
      declare_rw_options(c, "32M", "512K", "8", "1500", "6");
    };
    return t;
  });
}
