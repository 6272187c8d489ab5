#include "bench/iomethods/measure.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <stdexcept>
#include <system_error>

namespace warpstore::bench::iomethods {

double percentile(const std::vector<float>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("percentile of no samples");
  if (!(q > 0 && q <= 1)) throw std::invalid_argument("percentile: q must be in (0, 1]");
  // Nearest rank: the smallest sample with at least q of all samples at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::max<std::size_t>(rank, 1) - 1];
}

latency_summary summarize(std::vector<float>& us) {
  latency_summary s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.samples = us.size();
  s.p50_us = percentile(us, 0.50);
  s.p99_us = percentile(us, 0.99);
  s.p999_us = percentile(us, 0.999);
  s.max_us = us.back();
  return s;
}

double process_cpu_seconds() {
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) != 0)
    throw std::system_error(errno, std::generic_category(), "getrusage(RUSAGE_SELF)");
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace warpstore::bench::iomethods
