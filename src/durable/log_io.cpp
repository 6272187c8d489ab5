// The log's transfers, one source for both targets (log_io.cu builds it for
// the GPU): run_warps runs the task, each lane carrying one request through
// the queues (or the memory controller's pinned copy).
#include <algorithm>

#include "warpstore/durable/log.cuh"
#include "warpstore/launch.cuh"

namespace warpstore::durable::detail {

namespace {

struct block_io_body {
  block_io_task task;
  WARPSTORE_HD void operator()(std::uint64_t w, std::uint64_t n) const {
    task.run(warpstore::detail::warp::whole, w, n);
  }
};

// Enough warps to keep the queues busy, not one per request of a long list:
// at most 64 blocks of 128 threads on the GPU.
constexpr unsigned block_threads = 128;
constexpr std::uint64_t most_warps = 64 * block_threads / 32;

}  // namespace

void run_block_io(const block_io_task& task) {
  const std::uint64_t want =
      task.flush_only ? 1 : (task.count + lanes_per_warp - 1) / lanes_per_warp;
  run_warps(std::clamp<std::uint64_t>(want, 1, most_warps), block_io_body{task}, block_threads);
}

}  // namespace warpstore::durable::detail
