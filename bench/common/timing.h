// Wall-clock timing on the CPU side (GPU timing: bench/common/gpu.cuh).
#pragma once

#include <chrono>

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

}  // namespace warpstore::bench
