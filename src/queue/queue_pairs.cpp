#include "warpstore/detail/queue_pairs.h"

#include <bit>
#include <stdexcept>
#include <string>

#include "warpstore/settings.h"

namespace warpstore::detail {

namespace {
constexpr std::uint32_t doorbell_stride = 16;  // 64 bytes between doorbells
}

queue_pairs::queue_pairs(std::uint32_t count, std::uint32_t depth, std::uint32_t slot_bytes,
                         bool with_staging, std::uint64_t timeout_ns)
    : depth_(depth), slot_bytes_(slot_bytes) {
  if (count == 0 || count > 65535)
    throw invalid_argument("queue pair count must be 1..65535, got " + std::to_string(count));
  // A GPU warp takes up to 32 tickets at once; they must not share a slot.
  const std::uint32_t min_depth = runtime::gpu_build() ? 32 : 2;
  if (depth < min_depth || depth > max_queue_depth || !std::has_single_bit(depth))
    throw invalid_argument("queue depth must be a power of two in " + std::to_string(min_depth) +
                           ".." + std::to_string(max_queue_depth) + ", got " +
                           std::to_string(depth));
  if (slot_bytes == 0 || slot_bytes % nvme::block_size != 0)
    throw invalid_argument("queue slot size must be a multiple of 512, got " +
                           std::to_string(slot_bytes));
  const std::size_t entries = std::size_t{count} * depth;
  sq_ = runtime::make_host_mapped<nvme::command>(entries);
  cq_ = runtime::make_host_mapped<nvme::completion>(entries);
  doorbells_ = runtime::make_host_mapped<std::uint32_t>(std::size_t{count} * 2 * doorbell_stride);
  if (with_staging) staging_ = runtime::make_host_mapped<std::byte>(entries * slot_bytes);
  state_ = runtime::make_device<queue_state>(count);
  marks_ = runtime::make_device<std::uint64_t>(entries);
  turns_ = runtime::make_device<std::uint64_t>(entries);
  completions_ = runtime::make_device<std::uint32_t>(entries);

  views_.resize(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    queue_pair_ref& v = views_[i];
    const std::size_t base = std::size_t{i} * depth;
    v.sq = sq_.get() + base;
    v.cq = cq_.get() + base;
    v.sq_tail_doorbell = doorbells_.get() + std::size_t{2 * i} * doorbell_stride;
    v.cq_head_doorbell = doorbells_.get() + std::size_t{2 * i + 1} * doorbell_stride;
    v.staging = with_staging ? staging_.get() + base * slot_bytes : nullptr;
    v.slot_bytes = slot_bytes;
    v.depth = depth;
    v.depth_log2 = static_cast<std::uint32_t>(std::countr_zero(depth));
    v.qid = static_cast<std::uint16_t>(i + 1);  // 0 is the admin queue in NVMe
    v.nsid = 1;
    v.timeout_ns = timeout_ns;
    v.state = state_.get() + i;
    v.marks = marks_.get() + base;
    v.turns = turns_.get() + base;
    v.completions = completions_.get() + base;
  }
  device_views_ = runtime::make_device<queue_pair_ref>(count, false);
  runtime::copy_to_device(device_views_.get(), views_.data(), count * sizeof(queue_pair_ref));
}

std::size_t queue_pairs::staging_bytes() const {
  return staging_ ? std::size_t{count()} * depth_ * slot_bytes_ : 0;
}

std::uint64_t queue_pairs::protocol_errors() const {
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < count(); ++i) {
    queue_state s;
    runtime::copy_to_host(&s, state_.get() + i, sizeof s);
    total += s.protocol_errors;
  }
  return total;
}

}  // namespace warpstore::detail
