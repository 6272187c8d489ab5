// GPU build of the log's transfers: a kernel whose lanes each carry one
// request through the queues (or the memory controller's pinned copy).
#include "warpstore/cuda_check.h"
#include "warpstore/durable/log.cuh"

namespace warpstore::durable::detail {

namespace {

constexpr unsigned block_threads = 128;

__global__ void block_io_kernel(block_io_task task) {
  const std::uint64_t thread = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  task.run(0xFFFFFFFFu, thread / 32, std::uint64_t{gridDim.x} * blockDim.x / 32);
}

}  // namespace

void run_block_io(const block_io_task& task) {
  // Enough warps to keep the queues busy, not one per request of a long list.
  const std::uint64_t warps = task.flush_only ? 1 : (task.count + 31) / 32;
  const auto blocks = static_cast<unsigned>(
      std::min<std::uint64_t>(std::max<std::uint64_t>(1, (warps * 32 + block_threads - 1) / block_threads), 64));
  block_io_kernel<<<blocks, block_threads>>>(task);
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
}

}  // namespace warpstore::durable::detail
