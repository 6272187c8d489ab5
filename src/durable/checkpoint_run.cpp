// The checkpoint host forms, one source for both targets (checkpoint_run.cu
// builds it for the GPU): run_warps runs the device form, each warp one share.
#include <algorithm>

#include "warpstore/durable/checkpoint.cuh"
#include "warpstore/launch.cuh"

namespace warpstore::detail {

namespace {

// One warp: reads the two records (the host's open).
struct scan_body {
  checkpoint_ref ref;
  WARPSTORE_HD void operator()(std::uint64_t, std::uint64_t) const { ref.scan(); }
};

// Warp w of n: its share of a checkpoint (op 1) or a restore (op 2).
struct share_body {
  checkpoint_ref ref;
  int op;
  WARPSTORE_HD void operator()(std::uint64_t w, std::uint64_t n) const {
    if (op == 1) ref.checkpoint(w, n);
    else ref.restore(w, n);
  }
};

}  // namespace

void run_checkpoint_op(const checkpoint_ref& ref, int op, std::uint32_t warps) {
  if (op == 0) run_warps(1, scan_body{ref});
  else run_warps(warps, share_body{ref, op});
}

std::uint32_t checkpoint_warp_size() { return lanes_per_warp; }

std::uint32_t checkpoint_default_warps(std::uint64_t chunks) {
#if defined(__CUDACC__)
  // Eight warps of 32 commands fill a queue pair of depth 256 per multiprocessor.
  const std::uint64_t most = std::uint64_t{runtime::processor_count()} * 8;
#else
  const std::uint64_t most = cpu_warps();
#endif
  const std::uint64_t want = (chunks + lanes_per_warp - 1) / lanes_per_warp;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(want, 1, most));
}

}  // namespace warpstore::detail
