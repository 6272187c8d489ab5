// Owning host object for a controller's queue pairs: allocates the
// host-visible rings and doorbells (pinned, mapped), the staging buffers and
// the GPU-private protocol state, and hands out views. A controller whose
// device owns the rings and doorbells (nvme: the queues the driver created,
// the doorbells in BAR0) passes them in instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "warpstore/queue.cuh"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore::detail {

class queue_pairs {
 public:
  // `slot_bytes` is the largest transfer one command may carry; staging
  // buffers (slot_bytes per slot) exist only when `with_staging`.
  queue_pairs(std::uint32_t count, std::uint32_t depth, std::uint32_t slot_bytes,
              bool with_staging, std::uint64_t timeout_ns);

  // Rings a device reads and writes, made elsewhere: `depth` entries each,
  // in memory kernels can reach (mapped), and doorbells kernels can write.
  struct device_rings {
    nvme::command* sq;
    nvme::completion* cq;
    std::uint32_t* sq_tail_doorbell;
    std::uint32_t* cq_head_doorbell;
    std::uint16_t qid;
  };
  // Memory such a device reaches: `bytes` zeroed, aligned to a memory page,
  // kernels address it at `host`, the device at `device` (contiguous there
  // too: an IOVA range behind an IOMMU, the virtual address without one).
  // Its owner frees it, after the device's last DMA.
  struct device_buffer {
    std::byte* host = nullptr;
    std::uint64_t device = 0;
  };
  using device_alloc = std::function<device_buffer(std::size_t bytes)>;
  // Over those rings, with staging and, for a device that walks PRPs, a
  // PRP list per slot: lines over two memory pages are addressed through
  // it. Both come from `alloc`, and the device is given their `device`
  // addresses (PRP1, the list pointer in PRP2, the entries of the lists).
  queue_pairs(const std::vector<device_rings>& rings, std::uint32_t depth, std::uint32_t slot_bytes,
              std::uint32_t nsid, std::uint64_t timeout_ns, const device_alloc& alloc);

  // How many pairs a controller makes for `opts`: options::queue_pairs, or
  // one per multiprocessor (processor on the CPU target), at most 128.
  static std::uint32_t count_for(const options& opts);

  std::uint32_t count() const { return static_cast<std::uint32_t>(views_.size()); }
  std::uint32_t depth() const { return depth_; }
  std::uint32_t slot_bytes() const { return slot_bytes_; }
  // Host-visible fields of the view are valid on the host; the rest point
  // into device memory.
  const queue_pair_ref& view(std::uint32_t i) const { return views_.at(i); }
  queue_set_ref device_ref() const { return {device_views_.get(), count()}; }
  // Staging memory of all queues, contiguous: queue i at i * depth * slot_bytes.
  std::byte* staging() const { return staging_base_; }
  std::size_t staging_bytes() const;
  // Protocol errors counted by the GPU side (CQEs for slots not in flight).
  std::uint64_t protocol_errors() const;
  // Doorbell writes of the GPU side, summed over the pairs.
  struct doorbell_count {
    std::uint64_t sq_tail = 0;
    std::uint64_t cq_head = 0;
  };
  doorbell_count doorbells() const;

 private:
  std::uint32_t depth_;
  std::uint32_t slot_bytes_;
  runtime::host_mapped_ptr<nvme::command> sq_;
  runtime::host_mapped_ptr<nvme::completion> cq_;
  runtime::host_mapped_ptr<std::uint32_t> doorbells_;  // 16 words apart: one line each
  runtime::host_mapped_ptr<std::byte> staging_;
  std::byte* staging_base_ = nullptr;  // staging_, or the device's staging from its alloc
  runtime::device_ptr<queue_state> state_;
  runtime::device_ptr<std::uint64_t> marks_;
  runtime::device_ptr<std::uint64_t> turns_;
  runtime::device_ptr<std::uint32_t> completions_;
  std::vector<queue_pair_ref> views_;
  runtime::device_ptr<queue_pair_ref> device_views_;

  // Validates depth and slot size; allocates the device-private state and
  // fills every view but its rings and doorbells.
  void init(std::uint32_t count, bool with_staging, std::uint64_t timeout_ns,
            const device_alloc* alloc = nullptr);
  void publish();
};

}  // namespace warpstore::detail
