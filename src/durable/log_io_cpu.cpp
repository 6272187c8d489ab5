// CPU target of the log's transfers: std::thread lanes, each a warp of one
// lane, share the requests (as the host flush does, src/array/flush_cpu.cpp).
#include <algorithm>
#include <thread>
#include <vector>

#include "warpstore/durable/log.cuh"

namespace warpstore::durable::detail {

void run_block_io(const block_io_task& task) {
  if (task.flush_only) {
    task.run(1u, 0, 1);
    return;
  }
  const std::uint64_t lanes = std::clamp<std::uint64_t>(task.count, 1,
                                                        std::max(2u, std::min(8u, std::thread::hardware_concurrency())));
  std::vector<std::thread> threads;
  threads.reserve(lanes);
  for (std::uint64_t t = 0; t < lanes; ++t)
    threads.emplace_back([&task, t, lanes] { task.run(1u, t, lanes); });
  for (auto& th : threads) th.join();
}

}  // namespace warpstore::durable::detail
