// Running a key-value store body (kvstore.cuh) on the CPU target: `warps`
// std::threads (at most max_warps), each a warp of one lane, called as
// body(warp, warps).
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace warpstore::kv {

struct cpu_launch {
  static constexpr std::uint64_t max_warps = 32;

  template <class Body>
  void operator()(std::uint64_t warps, const Body& body) const {
    const std::uint64_t n = std::clamp<std::uint64_t>(warps, 1, max_warps);
    std::vector<std::thread> pool;
    pool.reserve(n);
    for (std::uint64_t w = 0; w < n; ++w) pool.emplace_back([&body, w, n] { body(w, n); });
    for (auto& t : pool) t.join();
  }
};

}  // namespace warpstore::kv
