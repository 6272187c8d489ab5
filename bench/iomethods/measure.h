// What every method of the I/O-methods comparison reports besides its rate:
// the latency of its requests (percentiles) and the CPU time the process
// spent while it ran (getrusage of the whole process, so service threads,
// driver threads and waiting host threads are all counted).
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <vector>

namespace warpstore::bench::iomethods {

struct latency_summary {
  std::uint64_t samples = 0;
  double p50_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
};

// Nearest-rank percentile q in (0, 1] of `sorted` (ascending, not empty).
double percentile(const std::vector<float>& sorted, double q);

// Sorts `us` (microseconds per request) and summarizes it; all zero when empty.
latency_summary summarize(std::vector<float>& us);

// User plus system CPU seconds of the whole process so far.
double process_cpu_seconds();

// CPU seconds the process spends between construction and seconds().
class cpu_meter {
 public:
  cpu_meter() : start_(process_cpu_seconds()) {}
  double seconds() const { return process_cpu_seconds() - start_; }

 private:
  double start_;
};

// Nanoseconds on CLOCK_MONOTONIC (clock_gettime), the clock of the CPU methods' latencies.
std::uint64_t monotonic_ns();

}  // namespace warpstore::bench::iomethods
