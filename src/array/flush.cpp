// The host flush, one source for both targets (flush.cu builds it for the
// GPU): run_warps writes back the dirty lines cluster by cluster, then what
// is left, then one warp sends the FLUSH once all are written.
#include <algorithm>

#include "warpstore/detail/line_io.cuh"
#include "warpstore/launch.cuh"

namespace warpstore::detail {

namespace {

// Each warp a run of 32 slots at a time, striding by the warps of the
// launch: whole clusters first (`clusters`), or what is left.
struct write_back_pass {
  line_io lines;
  bool clusters;

  WARPSTORE_HD void operator()(std::uint64_t w, std::uint64_t n) const {
    const std::uint64_t slots = lines.cache.num_lines;
    for (std::uint64_t first = w * 32; first < slots; first += n * 32) {
      const auto count = static_cast<std::uint32_t>(slots - first < 32 ? slots - first : 32);
      if (clusters)
        lines.write_back_clusters(warp::whole, static_cast<std::uint32_t>(first), count);
      else
        lines.write_back_range(warp::whole, static_cast<std::uint32_t>(first), count);
    }
  }
};

struct flush_pass {
  line_io lines;

  WARPSTORE_HD void operator()(std::uint64_t, std::uint64_t) const {
    if (warp::lane() == 0) lines.flush_controller();
  }
};

}  // namespace

void flush_lines(const line_io& lines) {
  // One warp per run on the GPU; the CPU target's threads take several.
  const std::uint64_t runs = (std::uint64_t{lines.cache.num_lines} + 31) / 32;
  for (const bool clusters : {true, false})
    run_warps(std::max<std::uint64_t>(runs, 1), write_back_pass{lines, clusters});
  run_warps(1, flush_pass{lines});
}

}  // namespace warpstore::detail
