#include "warpstore/detail/queue_pairs.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "warpstore/settings.h"

namespace warpstore::detail {

namespace {
constexpr std::uint32_t doorbell_stride = 16;  // 64 bytes between doorbells
}

std::uint32_t queue_pairs::count_for(const options& opts) {
  return opts.queue_pairs != 0 ? opts.queue_pairs : std::min(runtime::processor_count(), 128u);
}

void queue_pairs::init(std::uint32_t count, bool with_staging, std::uint64_t timeout_ns,
                       const device_alloc* alloc) {
  if (count == 0 || count > 65535)
    throw invalid_argument("queue pair count must be 1..65535, got " + std::to_string(count));
  // A GPU warp takes up to 32 tickets at once; they must not share a slot.
  const std::uint32_t min_depth = runtime::gpu_build() ? 32 : 2;
  if (depth_ < min_depth || depth_ > max_queue_depth || !std::has_single_bit(depth_))
    throw invalid_argument("queue depth must be a power of two in " + std::to_string(min_depth) +
                           ".." + std::to_string(max_queue_depth) + ", got " +
                           std::to_string(depth_));
  if (slot_bytes_ == 0 || slot_bytes_ % nvme::block_size != 0)
    throw invalid_argument("queue slot size must be a multiple of 512, got " +
                           std::to_string(slot_bytes_));
  const std::size_t entries = std::size_t{count} * depth_;
  std::uint64_t staging_device = 0;
  if (with_staging && alloc != nullptr) {
    const device_buffer b = (*alloc)(entries * slot_bytes_);
    staging_base_ = b.host;
    staging_device = b.device;
  } else if (with_staging) {
    staging_ = runtime::make_host_mapped<std::byte>(entries * slot_bytes_);
    staging_base_ = staging_.get();
    staging_device = reinterpret_cast<std::uint64_t>(staging_base_);
  }
  state_ = runtime::make_device<queue_state>(count);
  marks_ = runtime::make_device<std::uint64_t>(entries);
  turns_ = runtime::make_device<std::uint64_t>(entries);
  completions_ = runtime::make_device<std::uint32_t>(entries);

  views_.assign(count, queue_pair_ref{});
  for (std::uint32_t i = 0; i < count; ++i) {
    queue_pair_ref& v = views_[i];
    const std::size_t base = std::size_t{i} * depth_;
    v.staging = with_staging ? staging_base_ + base * slot_bytes_ : nullptr;
    v.staging_device = with_staging ? staging_device + base * slot_bytes_ : 0;
    v.slot_bytes = slot_bytes_;
    v.depth = depth_;
    v.depth_log2 = static_cast<std::uint32_t>(std::countr_zero(depth_));
    v.qid = static_cast<std::uint16_t>(i + 1);  // 0 is the admin queue in NVMe
    v.nsid = 1;
    v.timeout_ns = timeout_ns;
    v.state = state_.get() + i;
    v.marks = marks_.get() + base;
    v.turns = turns_.get() + base;
    v.completions = completions_.get() + base;
  }
}

void queue_pairs::publish() {
  device_views_ = runtime::make_device<queue_pair_ref>(views_.size(), false);
  runtime::copy_to_device(device_views_.get(), views_.data(),
                          views_.size() * sizeof(queue_pair_ref));
}

queue_pairs::queue_pairs(std::uint32_t count, std::uint32_t depth, std::uint32_t slot_bytes,
                         bool with_staging, std::uint64_t timeout_ns)
    : depth_(depth), slot_bytes_(slot_bytes) {
  init(count, with_staging, timeout_ns);
  const std::size_t entries = std::size_t{count} * depth;
  sq_ = runtime::make_host_mapped<nvme::command>(entries);
  cq_ = runtime::make_host_mapped<nvme::completion>(entries);
  doorbells_ = runtime::make_host_mapped<std::uint32_t>(std::size_t{count} * 2 * doorbell_stride);
  for (std::uint32_t i = 0; i < count; ++i) {
    queue_pair_ref& v = views_[i];
    const std::size_t base = std::size_t{i} * depth;
    v.sq = sq_.get() + base;
    v.cq = cq_.get() + base;
    v.sq_tail_doorbell = doorbells_.get() + std::size_t{2 * i} * doorbell_stride;
    v.cq_head_doorbell = doorbells_.get() + std::size_t{2 * i + 1} * doorbell_stride;
  }
  publish();
}

queue_pairs::queue_pairs(const std::vector<device_rings>& rings, std::uint32_t depth,
                         std::uint32_t slot_bytes, std::uint32_t nsid, std::uint64_t timeout_ns,
                         const device_alloc& alloc)
    : depth_(depth), slot_bytes_(slot_bytes) {
  const auto count = static_cast<std::uint32_t>(rings.size());
  init(count, /*with_staging=*/true, timeout_ns, &alloc);
  // A slot's staging starts on a memory page when it is a page or more, so
  // its pages after the first are whole pages a PRP list can name.
  const std::uint64_t page = nvme::memory_page;
  if (slot_bytes > page && slot_bytes % page != 0)
    throw invalid_argument("queue slot size over a memory page must be a multiple of it, got " +
                           std::to_string(slot_bytes));
  const std::uint64_t list_entries = slot_bytes > 2 * page ? slot_bytes / page - 1 : 0;
  // Each slot's list within one memory page (a list that crossed one would
  // have its last entry read as a pointer to the next list).
  const std::uint32_t stride =
      list_entries == 0 ? 0 : std::bit_ceil(static_cast<std::uint32_t>(list_entries * 8));
  device_buffer lists_memory;
  if (list_entries != 0) lists_memory = alloc(std::size_t{count} * depth * stride);
  for (std::uint32_t i = 0; i < count; ++i) {
    queue_pair_ref& v = views_[i];
    v.sq = rings[i].sq;
    v.cq = rings[i].cq;
    v.sq_tail_doorbell = rings[i].sq_tail_doorbell;
    v.cq_head_doorbell = rings[i].cq_head_doorbell;
    v.qid = rings[i].qid;
    v.nsid = nsid;
    if (list_entries == 0) continue;
    const std::size_t first = std::size_t{i} * depth * stride;
    std::byte* lists = lists_memory.host + first;
    v.prp_lists = lists_memory.device + first;
    v.prp_list_stride = stride;
    for (std::uint32_t s = 0; s < depth; ++s) {
      auto* list = reinterpret_cast<std::uint64_t*>(lists + std::size_t{s} * stride);
      const std::uint64_t slot = v.staging_device + std::uint64_t{s} * slot_bytes;
      for (std::uint64_t e = 0; e < list_entries; ++e) list[e] = slot + (e + 1) * page;
    }
  }
  publish();
}

std::size_t queue_pairs::staging_bytes() const {
  return staging_base_ != nullptr ? std::size_t{count()} * depth_ * slot_bytes_ : 0;
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

queue_pairs::doorbell_count queue_pairs::doorbells() const {
  doorbell_count total;
  for (std::uint32_t i = 0; i < count(); ++i) {
    queue_state s;
    runtime::copy_to_host(&s, state_.get() + i, sizeof s);
    total.sq_tail += s.sq_doorbells;
    total.cq_head += s.cq_doorbells;
  }
  return total;
}

}  // namespace warpstore::detail
