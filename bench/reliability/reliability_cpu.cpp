// warpstore-reliability-cpu: the reliability study on the CPU target, where
// a "warp" is one std::thread (see detail/platform.cuh).
#include <cstdio>
#include <exception>
#include <thread>

#include "bench/reliability/reliability.h"

namespace {

// Lanes split the indices; each reads its share with operator[].
void read_on_threads(const warpstore::array<std::uint64_t>& a,
                     const std::vector<std::uint64_t>& indices, std::vector<std::uint64_t>& out) {
  const auto ref = a.ref();
  const unsigned lanes = 8;
  std::vector<std::thread> threads;
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      for (std::size_t k = l; k < indices.size(); k += lanes) out[k] = ref[indices[k]];
    });
  for (auto& t : threads) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    warpstore::reliability::target t;
    t.name = "cpu";
    t.device = "CPU target (std::thread lanes)";
    t.read = read_on_threads;
    return warpstore::reliability::run_study(argc, argv, t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warpstore-reliability-cpu: error: %s\n", e.what());
    return 3;
  }
}
