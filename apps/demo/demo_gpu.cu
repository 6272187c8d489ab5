// The demo on the GPU: a million threads gather random elements.
#include <exception>

#include "demo.h"

int main(int argc, char** argv) try {
  demo::config c = demo::parse(argc, argv, 4ull << 30, 16'000'000);
  demo::ensure_file(c);
  warpstore::array<std::uint64_t> a(c.path, 0, c.opts);
  const auto [seconds, wrong] = demo::gather(a, c, 4096 * 256 / 32);  // 4096 blocks of 256
  const std::string dev = warpstore::runtime::device_name();
  return demo::report(c, dev.c_str(), a.shared_controller()->name(), seconds, wrong, a.stats());
} catch (const std::exception& e) {
  std::fprintf(stderr, "warpstore-demo: %s\n", e.what());
  return 2;
}
