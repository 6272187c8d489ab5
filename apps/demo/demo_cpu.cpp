// The demo on the CPU target: std::thread lanes instead of GPU threads.
#include <atomic>
#include <chrono>
#include <exception>
#include <vector>

#include "demo.h"

int main(int argc, char** argv) try {
  demo::config c = demo::parse(argc, argv, 2ull << 30, 2'000'000);
  demo::ensure_file(c);
  warpstore::array<std::uint64_t> a(c.path, 0, c.opts);
  const warpstore::array_ref<std::uint64_t> ref = a.ref();
  const unsigned lanes = 4 * std::max(1u, std::thread::hardware_concurrency());
  std::atomic<std::uint64_t> wrong{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      std::uint64_t bad = 0;
      for (std::uint64_t k = l; k < c.reads; k += lanes) {
        const std::uint64_t i = warpstore::tools::pattern_word(k * 8, 12345) % ref.size();
        bad += ref[i] != warpstore::tools::pattern_word(i * 8);
      }
      wrong += bad;
    });
  for (auto& t : threads) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  a.check();
  return demo::report(c, "CPU target (no GPU)", a.shared_controller()->name(), s, wrong, a.stats());
} catch (const std::exception& e) {
  std::fprintf(stderr, "warpstore-demo: %s\n", e.what());
  return 2;
}
