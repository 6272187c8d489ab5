// Running an algorithm body (algorithms.cuh) over every warp of a launch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace warpstore::apps {

// The CPU target: `lanes` std::threads, each a warp of one lane.
struct cpu_launch {
  unsigned lanes = std::max(2u, std::thread::hardware_concurrency());

  template <class Body>
  void operator()(const Body& body) const {
    std::vector<std::thread> pool;
    for (unsigned l = 0; l < lanes; ++l) pool.emplace_back([&body, l, this] { body(l, lanes); });
    for (auto& t : pool) t.join();
  }
};

}  // namespace warpstore::apps
