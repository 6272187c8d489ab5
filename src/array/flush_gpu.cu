// GPU build of the host flush: one kernel writes back the dirty lines cluster
// by cluster (each warp a run of 32 slots), a second what is left, a third
// sends the FLUSH once all are written.
#include "warpstore/cuda_check.h"
#include "warpstore/detail/line_io.cuh"

namespace warpstore::detail {

namespace {

constexpr unsigned block_threads = 256;

// Each warp a run of 32 slots: whole clusters first (`clusters`), or what is
// left.
__global__ void write_back_kernel(line_io lines, bool clusters) {
  const std::uint64_t warp_id = (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const std::uint64_t first = warp_id * 32;
  if (first >= lines.cache.num_lines) return;  // whole warps leave together
  const std::uint64_t left = lines.cache.num_lines - first;
  const auto n = static_cast<std::uint32_t>(left < 32 ? left : 32);
  if (clusters)
    lines.write_back_clusters(0xFFFFFFFFu, static_cast<std::uint32_t>(first), n);
  else
    lines.write_back_range(0xFFFFFFFFu, static_cast<std::uint32_t>(first), n);
}

__global__ void flush_kernel(line_io lines) {
  lines.flush_controller();
}

}  // namespace

void flush_lines(const line_io& lines) {
  const std::uint64_t threads = (std::uint64_t{lines.cache.num_lines} + 31) / 32 * 32;
  const auto blocks = static_cast<unsigned>((threads + block_threads - 1) / block_threads);
  write_back_kernel<<<blocks, block_threads>>>(lines, true);
  WARPSTORE_CHECK_LAUNCH();
  write_back_kernel<<<blocks, block_threads>>>(lines, false);
  WARPSTORE_CHECK_LAUNCH();
  flush_kernel<<<1, 1>>>(lines);
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
}

}  // namespace warpstore::detail
