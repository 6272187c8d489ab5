// CPU target of the host flush: std::thread lanes write back the dirty lines
// (cluster by cluster, then what is left), then one sends the FLUSH.
#include <algorithm>
#include <thread>
#include <vector>

#include "warpstore/detail/line_io.cuh"

namespace warpstore::detail {

void flush_lines(const line_io& lines) {
  const std::uint32_t n = lines.cache.num_lines;
  const unsigned lanes = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  const std::uint32_t per = (n + lanes - 1) / lanes;
  // Clusters first, then what is left, each pass over all threads.
  for (const bool clusters : {true, false}) {
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < lanes; ++t) {
      const std::uint32_t first = std::min(n, t * per);
      const std::uint32_t count = std::min(n, first + per) - first;
      threads.emplace_back([&lines, first, count, clusters] {
        if (clusters)
          lines.write_back_clusters(1u, first, count);
        else
          lines.write_back_range(1u, first, count);
      });
    }
    for (auto& th : threads) th.join();
  }
  lines.flush_controller();
}

}  // namespace warpstore::detail
