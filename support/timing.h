// Wall-clock timing on the CPU side (GPU timing: support/gpu.cuh).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <vector>

namespace warpstore::bench {

class stopwatch {
 public:
  using clock = std::chrono::steady_clock;
  stopwatch() : start_(clock::now()) {}
  void restart() { start_ = clock::now(); }
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

 private:
  clock::time_point start_;
};

// Bytes over seconds in GB/s (10^9 bytes per second), and operations per second.
inline double gb_per_s(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
inline double per_s(double ops, double seconds) { return seconds > 0 ? ops / seconds : 0; }

// Index of the median of repeated timings (the lower one of an even count),
// so the median trial's other figures can be reported with it.
inline std::size_t median_index(const std::vector<double>& secs) {
  std::vector<std::size_t> order(secs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return secs[a] < secs[b]; });
  return order[(order.size() - 1) / 2];
}

}  // namespace warpstore::bench
