// GPU build of the checkpoint host forms: one kernel runs the device form,
// each warp of the grid one share.
#include <algorithm>

#include "warpstore/cuda_check.h"
#include "warpstore/durable/checkpoint.cuh"

namespace warpstore::detail {

namespace {

constexpr unsigned block_threads = 256;
constexpr unsigned warps_per_block = block_threads / 32;

__global__ void checkpoint_kernel(checkpoint_ref ref, int op, std::uint32_t warps) {
  const std::uint64_t warp = (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (op == 0) {
    if (warp == 0) ref.scan();
    return;
  }
  if (warp >= warps) return;  // whole warps leave together
  if (op == 1) ref.checkpoint(warp, warps);
  else ref.restore(warp, warps);
}

}  // namespace

void run_checkpoint_op(const checkpoint_ref& ref, int op, std::uint32_t warps) {
  const std::uint32_t blocks = (std::max(warps, 1u) + warps_per_block - 1) / warps_per_block;
  checkpoint_kernel<<<blocks, block_threads>>>(ref, op, warps);
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
}

std::uint32_t checkpoint_warp_size() { return 32; }

std::uint32_t checkpoint_default_warps(std::uint64_t chunks) {
  int device = 0, sms = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&device));
  WARPSTORE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // Eight warps of 32 commands fill a queue pair of depth 256 per multiprocessor.
  const std::uint64_t most = std::uint64_t{static_cast<unsigned>(sms)} * 8;
  const std::uint64_t want = (chunks + 31) / 32;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(want, 1, most));
}

}  // namespace warpstore::detail
