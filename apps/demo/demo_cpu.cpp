// The demo on the CPU target: std::thread lanes instead of GPU threads.
#include <exception>

#include "demo.h"

int main(int argc, char** argv) try {
  demo::config c = demo::parse(argc, argv, 2ull << 30, 2'000'000);
  demo::ensure_file(c);
  warpstore::array<std::uint64_t> a(c.path, 0, c.opts);
  const auto [seconds, wrong] = demo::gather(a, c, 0);  // cpu_warps() threads
  return demo::report(c, "CPU target (no GPU)", a.shared_controller()->name(), seconds, wrong,
                      a.stats());
} catch (const std::exception& e) {
  std::fprintf(stderr, "warpstore-demo: %s\n", e.what());
  return 2;
}
