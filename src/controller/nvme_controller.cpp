#include "controller/nvme_controller.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "warpstore/error.h"
#include "warpstore/runtime.h"

namespace warpstore {

void* nvme_controller::mapped_dma_memory::alloc(std::size_t bytes, std::size_t align) {
  // cudaHostAlloc promises no alignment, and the driver packs small
  // allocations (a queue's ring) into shared pages: ask for `align` more and
  // hand out the aligned part, remembering where the allocation starts.
  void* base = runtime::alloc_host_mapped(bytes + align);
  const auto at = (reinterpret_cast<std::uintptr_t>(base) + align - 1) & ~(std::uintptr_t{align} - 1);
  void* p = reinterpret_cast<void*>(at);
  try {
    const std::lock_guard lock(mutex_);
    bases_.emplace(p, base);
  } catch (...) {
    runtime::free_host_mapped(base);
    throw;
  }
  std::memset(p, 0, bytes);
  return p;
}

std::uint64_t nvme_controller::mapped_dma_memory::iova(const void* p) const {
  return reinterpret_cast<std::uint64_t>(p);
}

void nvme_controller::mapped_dma_memory::free(void* p) noexcept {
  void* base = nullptr;
  {
    const std::lock_guard lock(mutex_);
    const auto it = bases_.find(p);
    if (it == bases_.end()) return;  // not ours: nothing to free
    base = it->second;
    bases_.erase(it);
  }
  runtime::free_host_mapped(base);
}

nvme_controller::bar_mapping::bar_mapping(const nvme_bar& bar) {
  // The CPU target writes the doorbells with plain stores; a GPU needs the
  // register file mapped (a real BAR: cudaHostRegisterIoMemory).
  if (!runtime::gpu_build()) return;
  if (!runtime::register_host(bar.base, bar.bytes, false))
    throw runtime_error("nvme-model: cannot map the device's registers (" +
                        std::to_string(bar.bytes) + " bytes) into the GPU");
  base = bar.base;
}

nvme_controller::bar_mapping::~bar_mapping() {
  if (base != nullptr) runtime::unregister_host(base);
}

nvme_controller::nvme_controller(std::shared_ptr<backing_file> file, const options& opts,
                                 std::uint32_t slot_bytes, nvme_model::config model)
    : controller(std::move(file)) {
  if (!file_) throw invalid_argument("nvme-model controller: no backing file");
  queue_spread_ = opts.queue_spread;
  const std::uint32_t wanted = std::min<std::uint32_t>(detail::queue_pairs::count_for(opts), 65534);
  model.path = file_->path();
  model.read_only = !file_->writable();
  model.max_queue_entries = std::max(model.max_queue_entries, opts.queue_depth);
  // The model grants what is asked, as a device with that many queues would.
  model.max_io_queues = static_cast<std::uint16_t>(
      std::max<std::uint32_t>(model.max_io_queues, wanted));
  model_ = std::make_unique<nvme_model::device>(model);
  const nvme_bar bar{model_->bar(), model_->bar_bytes()};
  bar_ = std::make_unique<bar_mapping>(bar);

  nvme_driver_options d;
  d.name = "model of " + file_->path();
  d.io_queues = static_cast<std::uint16_t>(wanted);
  d.io_queue_entries = opts.queue_depth;
  driver_ = std::make_unique<nvme_driver>(bar, mem_, d);
  const nvme_identity& id = driver_->identity();
  if (id.block_size != nvme::block_size)
    throw invalid_argument("nvme-model controller: the namespace has " +
                           std::to_string(id.block_size) + "-byte blocks; arrays address " +
                           std::to_string(nvme::block_size) + "-byte blocks");
  if (id.mdts_bytes != 0 && slot_bytes > id.mdts_bytes)
    throw invalid_argument("nvme-model controller: a " + std::to_string(slot_bytes) +
                           "-byte line exceeds the device's largest transfer (MDTS, " +
                           std::to_string(id.mdts_bytes) + " bytes); use a smaller line size");
  std::vector<detail::queue_pairs::device_rings> rings;
  std::uint32_t depth = 0;
  for (const nvme_queue_pair& p : driver_->queue_pairs()) {
    rings.push_back({p.sq, p.cq, p.sq_tail_doorbell, p.cq_head_doorbell, p.qid});
    depth = p.entries;
  }
  if (depth != opts.queue_depth)
    throw invalid_argument("nvme-model controller: the device grants queues of " +
                           std::to_string(depth) + " entries, not the " +
                           std::to_string(opts.queue_depth) + " asked for (queue_depth)");
  queues_ = std::make_unique<detail::queue_pairs>(rings, depth, slot_bytes, driver_->options().nsid,
                                                  opts.timeout_ns);
  bring_up_commands_ = model_->counters().commands;
}

nvme_controller::~nvme_controller() {
  // The device stops fetching before the staging it writes into goes.
  if (driver_) driver_->shutdown();
}

io_ref nvme_controller::device_ref() const {
  io_ref r{io_kind::queues, queues_->device_ref(), {}};
  r.queues.spread = queue_spread_;
  return r;
}

controller_stats nvme_controller::stats() const {
  controller_stats s;
  const nvme_model::stats m = model_->counters();
  s.commands = m.commands - bring_up_commands_;
  s.doorbells = queues_->doorbells().sq_tail;
  return s;
}

void nvme_controller::check() const {
  if ((driver_->csts() & nvme_reg::csts_cfs) != 0)
    throw runtime_error("nvme-model controller (" + file_->path() +
                        "): the device reports a fatal status (CSTS.CFS); it executes no more "
                        "commands");
}

}  // namespace warpstore
