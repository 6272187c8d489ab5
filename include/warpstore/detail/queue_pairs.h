// Owning host object for a controller's queue pairs: allocates the
// host-visible rings and doorbells (pinned, mapped), the staging buffers and
// the GPU-private protocol state, and hands out views.
#pragma once

#include <cstdint>
#include <vector>

#include "warpstore/queue.cuh"
#include "warpstore/runtime.h"

namespace warpstore::detail {

class queue_pairs {
 public:
  // `slot_bytes` is the largest transfer one command may carry; staging
  // buffers (slot_bytes per slot) exist only when `with_staging`.
  queue_pairs(std::uint32_t count, std::uint32_t depth, std::uint32_t slot_bytes,
              bool with_staging, std::uint64_t timeout_ns);

  std::uint32_t count() const { return static_cast<std::uint32_t>(views_.size()); }
  std::uint32_t depth() const { return depth_; }
  std::uint32_t slot_bytes() const { return slot_bytes_; }
  // Host-visible fields of the view are valid on the host; the rest point
  // into device memory.
  const queue_pair_ref& view(std::uint32_t i) const { return views_.at(i); }
  queue_set_ref device_ref() const { return {device_views_.get(), count()}; }
  // Staging memory of all queues, contiguous: queue i at i * depth * slot_bytes.
  std::byte* staging() const { return staging_.get(); }
  std::size_t staging_bytes() const;
  // Protocol errors counted by the GPU side (CQEs for slots not in flight).
  std::uint64_t protocol_errors() const;

 private:
  std::uint32_t depth_;
  std::uint32_t slot_bytes_;
  runtime::host_mapped_ptr<nvme::command> sq_;
  runtime::host_mapped_ptr<nvme::completion> cq_;
  runtime::host_mapped_ptr<std::uint32_t> doorbells_;  // 16 words apart: one line each
  runtime::host_mapped_ptr<std::byte> staging_;
  runtime::device_ptr<queue_state> state_;
  runtime::device_ptr<std::uint64_t> marks_;
  runtime::device_ptr<std::uint64_t> turns_;
  runtime::device_ptr<std::uint32_t> completions_;
  std::vector<queue_pair_ref> views_;
  runtime::device_ptr<queue_pair_ref> device_views_;
};

}  // namespace warpstore::detail
