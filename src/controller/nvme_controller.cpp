#include "controller/nvme_controller.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

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

nvme_controller::mapped_dma_memory::~mapped_dma_memory() {
  for (const auto& [p, base] : bases_) runtime::free_host_mapped(base);
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

nvme_controller::gpu_registered_memory::gpu_registered_memory(dma_memory& inner, std::string name)
    : inner_(inner), name_(std::move(name)) {}

nvme_controller::gpu_registered_memory::~gpu_registered_memory() {
  for (const auto& [p, registered] : blocks_) {
    if (registered) runtime::unregister_host(p);
    inner_.free(p);
  }
}

void* nvme_controller::gpu_registered_memory::alloc(std::size_t bytes, std::size_t align) {
  void* p = inner_.alloc(bytes, align);
  // vfio_dma_memory hands out whole pages of their own, so no two blocks
  // share a page CUDA would register twice.
  const std::size_t page = nvme::memory_page;
  const std::size_t span = (bytes + page - 1) / page * page;
  const bool registered = runtime::gpu_build();
  if (registered && !runtime::register_host(p, span, false)) {
    inner_.free(p);
    throw runtime_error("nvme " + name_ + ": cannot register " + std::to_string(span) +
                        " bytes of DMA memory with the GPU (cudaHostRegister); GPU threads "
                        "could not reach the queues or the staging");
  }
  try {
    const std::lock_guard lock(mutex_);
    blocks_.emplace(p, registered);
  } catch (...) {
    if (registered) runtime::unregister_host(p);
    inner_.free(p);
    throw;
  }
  return p;
}

std::uint64_t nvme_controller::gpu_registered_memory::iova(const void* p) const {
  return inner_.iova(p);
}

void nvme_controller::gpu_registered_memory::free(void* p) noexcept {
  bool registered = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = blocks_.find(p);
    if (it == blocks_.end()) return;  // not ours: nothing to free
    registered = it->second;
    blocks_.erase(it);
  }
  // The GPU lets go before the IOMMU mapping and the pages go.
  if (registered) runtime::unregister_host(p);
  inner_.free(p);
}

nvme_controller::bar_mapping::bar_mapping(const nvme_bar& bar, bool io_memory,
                                          const std::string& name) {
  // The CPU target writes the doorbells with plain stores; a GPU needs the
  // register file mapped: a real BAR as I/O memory (its stores become MMIO
  // writes), the model's register file as the ordinary memory it is.
  if (!runtime::gpu_build()) return;
  const bool ok = io_memory ? runtime::register_io_memory(bar.base, bar.bytes)
                            : runtime::register_host(bar.base, bar.bytes, false);
  if (!ok)
    throw runtime_error(name + ": cannot map the device's registers (" +
                        std::to_string(bar.bytes) + " bytes" +
                        (io_memory ? " of BAR0, cudaHostRegisterIoMemory" : "") +
                        ") into the GPU");
  base = bar.base;
}

nvme_controller::bar_mapping::~bar_mapping() {
  if (base != nullptr) runtime::unregister_host(base);
}

nvme_controller::nvme_controller(std::shared_ptr<backing_file> file, const options& opts,
                                 std::uint32_t slot_bytes, nvme_model::config model)
    : controller(std::move(file)) {
  if (!file_) throw invalid_argument("nvme-model controller: no backing file");
  label_ = "nvme-model controller";
  const std::uint32_t wanted = std::min<std::uint32_t>(detail::queue_pairs::count_for(opts), 65534);
  model.path = file_->path();
  model.read_only = !file_->writable();
  model.max_queue_entries = std::max(model.max_queue_entries, opts.queue_depth);
  // The model grants what is asked, as a device with that many queues would.
  model.max_io_queues = static_cast<std::uint16_t>(
      std::max<std::uint32_t>(model.max_io_queues, wanted));
  model_ = std::make_unique<nvme_model::device>(model);
  const nvme_bar bar{model_->bar(), model_->bar_bytes()};
  bar_ = std::make_unique<bar_mapping>(bar, /*io_memory=*/false, "nvme-model");
  mem_ = std::make_unique<mapped_dma_memory>();
  nvme_driver_options d;
  d.name = "model of " + file_->path();
  bring_up(bar, d, opts, slot_bytes, label_);
  bring_up_commands_ = model_->counters().commands;
}

nvme_controller::nvme_controller(const nvme_target& target, const options& opts,
                                 std::uint32_t slot_bytes, vfio_device_options vfio)
    : controller(nullptr) {
  // A function-level reset where the device has one: whatever a previous
  // owner left in flight stops before our queues exist. Without one, the
  // driver's bring-up still resets the controller (CC.EN = 0, CSTS.RDY = 0
  // within CAP.TO) before it programs the admin queues.
  vfio.reset_on_open = true;
  vfio_ = std::make_unique<vfio_device>(target.address.text(), vfio);
  attach(vfio_->bar(), vfio_->mapper(), target, opts, slot_bytes, {});
}

nvme_controller::nvme_controller(nvme_bar bar, iommu_mapper& mapper, const nvme_target& target,
                                 const options& opts, std::uint32_t slot_bytes,
                                 vfio_dma_options dma)
    : controller(nullptr) {
  attach(bar, mapper, target, opts, slot_bytes, std::move(dma));
}

void nvme_controller::attach(nvme_bar bar, iommu_mapper& mapper, const nvme_target& target,
                             const options& opts, std::uint32_t slot_bytes, vfio_dma_options dma) {
  label_ = "nvme controller (" + target.text() + ")";
  bar_ = std::make_unique<bar_mapping>(bar, /*io_memory=*/true, label_);
  dma.name = target.address.text();  // the device's messages name its PCI address
  iommu_ = std::make_unique<vfio_dma_memory>(mapper, dma);
  mem_ = std::make_unique<gpu_registered_memory>(*iommu_, target.address.text());
  nvme_driver_options d;
  d.name = target.address.text();
  d.nsid = target.nsid;
  bring_up(bar, d, opts, slot_bytes, label_);
  const nvme_identity& id = driver_->identity();
  file_ = backing_file::device_namespace(
      target.text(), id.blocks * id.block_size,
      opts.writable ? file_access::read_write : file_access::read_only);
}

void nvme_controller::bring_up(const nvme_bar& bar, nvme_driver_options d, const options& opts,
                               std::uint32_t slot_bytes, const std::string& label) {
  queue_spread_ = opts.queue_spread;
  const std::uint32_t wanted = std::min<std::uint32_t>(detail::queue_pairs::count_for(opts), 65534);
  d.io_queues = static_cast<std::uint16_t>(wanted);
  d.io_queue_entries = opts.queue_depth;
  driver_ = std::make_unique<nvme_driver>(bar, *mem_, d);
  const nvme_identity& id = driver_->identity();
  if (id.block_size != nvme::block_size)
    throw invalid_argument(label + ": the namespace has " + std::to_string(id.block_size) +
                           "-byte blocks; arrays address " + std::to_string(nvme::block_size) +
                           "-byte blocks");
  if (id.blocks == 0)
    throw invalid_argument(label + ": namespace " + std::to_string(d.nsid) +
                           " has no blocks (Identify Namespace: NSZE 0; the controller has " +
                           std::to_string(id.namespaces) + " namespaces)");
  if (id.mdts_bytes != 0 && slot_bytes > id.mdts_bytes)
    throw invalid_argument(label + ": a " + std::to_string(slot_bytes) +
                           "-byte line exceeds the device's largest transfer (MDTS, " +
                           std::to_string(id.mdts_bytes) + " bytes); use a smaller line size");
  std::vector<detail::queue_pairs::device_rings> rings;
  std::uint32_t depth = 0;
  for (const nvme_queue_pair& p : driver_->queue_pairs()) {
    rings.push_back({p.sq, p.cq, p.sq_tail_doorbell, p.cq_head_doorbell, p.qid});
    depth = p.entries;
  }
  if (depth != opts.queue_depth)
    throw invalid_argument(label + ": the device grants queues of " + std::to_string(depth) +
                           " entries, not the " + std::to_string(opts.queue_depth) +
                           " asked for (queue_depth)");
  // Staging and PRP lists come from the device's DMA memory (freed with
  // it, after the device is shut down) and are given to it by IOVA.
  dma_memory& mem = *mem_;
  const detail::queue_pairs::device_alloc alloc = [&mem](std::size_t bytes) {
    void* p = mem.alloc(bytes, nvme::memory_page);
    return detail::queue_pairs::device_buffer{static_cast<std::byte*>(p), mem.iova(p)};
  };
  queues_ = std::make_unique<detail::queue_pairs>(rings, depth, slot_bytes, driver_->options().nsid,
                                                  opts.timeout_ns, alloc);
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
  if (model_) s.commands = model_->counters().commands - bring_up_commands_;
  s.doorbells = queues_->doorbells().sq_tail;
  return s;
}

void nvme_controller::check() const {
  if ((driver_->csts() & nvme_reg::csts_cfs) != 0)
    throw runtime_error((model_ ? label_ + " (" + file_->path() + ")" : label_) +
                        ": the device reports a fatal status (CSTS.CFS); it executes no more "
                        "commands");
}

}  // namespace warpstore
