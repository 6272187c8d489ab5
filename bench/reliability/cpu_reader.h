// The CPU target's reader for the reliability scenarios: std::thread lanes
// (a "warp" is one thread there) split the indices and read with operator[].
#pragma once

#include <thread>
#include <vector>

#include "bench/reliability/reliability.h"

namespace warpstore::reliability {

inline void read_on_threads(const array<std::uint64_t>& a, const std::vector<std::uint64_t>& indices,
                            std::vector<std::uint64_t>& out) {
  const auto ref = a.ref();
  const unsigned lanes = 8;
  std::vector<std::thread> threads;
  for (unsigned l = 0; l < lanes; ++l)
    threads.emplace_back([&, l] {
      for (std::size_t k = l; k < indices.size(); k += lanes) out[k] = ref[indices[k]];
    });
  for (auto& t : threads) t.join();
}

}  // namespace warpstore::reliability
