// The `nvme` controller: GPU threads drive an NVMe device's I/O queues
// themselves. The user-space driver (nvme_driver.h) brings the device up
// and creates the queues; from then on no CPU is on the data path. Warps
// write SQEs into the rings the device reads, ring the SQ tail and CQ head
// doorbells in its BAR0 (mapped into the GPU), and retire the CQEs it posts
// by phase tag: the protocol of queue.cuh, the one the host controller's
// service threads answer, here answered by a device. The device moves each
// line into pinned staging (PRP1, PRP2 and, for lines over two memory
// pages, a PRP list per slot) and the waiting warp pulls it into the cache.
//
// The device is either of two, behind the same data path and the same
// GPU-visible queues:
//  - `controller="nvme-model"`: the software NVMe controller (nvme_model.h)
//    over the array's file. It is a device in every way the data path can
//    see (register file, doorbells, PRP walking, LBA checks, queue-full,
//    phase tags, injected faults), so the read and write tests run against
//    it as a third controller.
//  - `controller="nvme"`, path `nvme://<PCI address>[/ns<N>]`
//    (nvme_target.h): a real device through VFIO (vfio.h). BAR0 is the mmap
//    of its region, registered with the GPU as I/O memory; everything the
//    device reads or writes (rings, PRP lists, staging) comes from
//    vfio_dma_memory, mapped into its IOMMU domain, and the device is given
//    IOVAs. This path has not run on a real device or a real kernel's VFIO
//    (docs/NVME.md); the pieces after the open run in the tests over the
//    model's registers and a recording IOMMU mapper.
//
// No filesystem sits on a device driven this way: an array addresses the
// namespace's blocks from 0, which for the model are the file's bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "controller/nvme_driver.h"
#include "controller/nvme_model.h"
#include "controller/nvme_target.h"
#include "controller/vfio.h"
#include "warpstore/controller.h"
#include "warpstore/detail/queue_pairs.h"
#include "warpstore/settings.h"

namespace warpstore {

class nvme_controller final : public controller {
 public:
  // The software model over `file` (read-only unless the file was opened
  // writable), brought up with options.queue_pairs I/O queue pairs (0: one
  // per multiprocessor, at most 128) of options.queue_depth entries (the
  // model is configured to grant them), `slot_bytes` (the line size) the
  // largest transfer. Raises
  // invalid_argument for a line the device cannot take in one command, and
  // runtime_error (naming the step) if bring-up fails.
  nvme_controller(std::shared_ptr<backing_file> file, const options& opts, std::uint32_t slot_bytes,
                  nvme_model::config model = {});
  // The real device `target` names, through VFIO: opens it (vfio_device
  // raises runtime_error naming the address and the first missing piece:
  // the device in sysfs, vfio-pci, the IOMMU group, /dev/vfio/...), resets
  // it where it offers a function-level reset, and brings it up as the
  // constructor below does. The array's bytes are the namespace's:
  // NSZE blocks of 512 bytes (other block sizes are refused), read-only
  // unless options.writable. Every error names the PCI address.
  nvme_controller(const nvme_target& target, const options& opts, std::uint32_t slot_bytes,
                  vfio_device_options vfio = {});
  // A device whose BAR0 is `bar` and whose DMA goes through `mapper` (its
  // IOMMU domain): what the constructor above runs once the device is open.
  // Tests give it the model's registers and a recording mapper (with
  // iova_policy::identity in `dma`: the model reads IOVA as an address).
  // `bar` and `mapper` must outlive the controller.
  nvme_controller(nvme_bar bar, iommu_mapper& mapper, const nvme_target& target,
                  const options& opts, std::uint32_t slot_bytes, vfio_dma_options dma = {});
  // Shuts the device down (queues deleted, CC.SHN) before its memory goes.
  ~nvme_controller() override;
  nvme_controller(const nvme_controller&) = delete;
  nvme_controller& operator=(const nvme_controller&) = delete;

  // "nvme-model" over the model, "nvme" over a device.
  const char* name() const override { return model_ ? "nvme-model" : "nvme"; }
  io_ref device_ref() const override;
  // commands: I/O commands the device fetched (the model counts them; a
  // real device does not say: 0); doorbells: SQ tail doorbell writes of the
  // GPU side. errors and bytes are not counted (the device does not report
  // them; each failed command reaches its caller).
  controller_stats stats() const override;
  // Raises runtime_error once the device reports a fatal status (CSTS.CFS):
  // it executes nothing more, and commands in flight end at their deadline.
  void check() const override;

  // The model (nvme-model only; tests and benchmarks inject misbehaviour
  // through it).
  nvme_model::device& model() { return *model_; }
  const nvme_driver& driver() const { return *driver_; }
  const detail::queue_pairs& queues() const { return *queues_; }
  // The IOMMU mappings of a device (null for the model).
  const vfio_dma_memory* iommu_memory() const { return iommu_.get(); }

 private:
  // Memory the device can reach and kernels can map: pinned host memory,
  // its device address its virtual address (the model's DMA is a memcpy).
  // What is not freed is freed when it goes.
  class mapped_dma_memory final : public dma_memory {
   public:
    mapped_dma_memory() = default;
    ~mapped_dma_memory() override;
    mapped_dma_memory(const mapped_dma_memory&) = delete;
    mapped_dma_memory& operator=(const mapped_dma_memory&) = delete;
    void* alloc(std::size_t bytes, std::size_t align) override;
    std::uint64_t iova(const void* p) const override;
    void free(void* p) noexcept override;

   private:
    std::mutex mutex_;
    std::unordered_map<void*, void*> bases_;  // handed out -> allocated
  };
  // A device's DMA memory made reachable from GPU threads as well: every
  // allocation of `inner` (vfio_dma_memory: anonymous pages, pinned and
  // mapped into the IOMMU) is registered with CUDA on GPU builds, since
  // warps write the SQ rings, read the CQ rings and copy lines out of
  // staging. The other way round (cudaHostAlloc, then map_external) would
  // need page-aligned pinned memory, which cudaHostAlloc does not promise,
  // and would leave the driver's own rings unreachable from the GPU; this
  // way one allocator serves the driver, the rings and the staging, and
  // each block is IOMMU-mapped before CUDA sees it and unregistered before
  // it is unmapped. What is not freed is freed when it goes.
  class gpu_registered_memory final : public dma_memory {
   public:
    gpu_registered_memory(dma_memory& inner, std::string name);
    ~gpu_registered_memory() override;
    gpu_registered_memory(const gpu_registered_memory&) = delete;
    gpu_registered_memory& operator=(const gpu_registered_memory&) = delete;
    void* alloc(std::size_t bytes, std::size_t align) override;
    std::uint64_t iova(const void* p) const override;
    void free(void* p) noexcept override;

   private:
    dma_memory& inner_;
    std::string name_;
    std::mutex mutex_;
    std::unordered_map<void*, bool> blocks_;  // handed out -> registered with CUDA
  };
  // BAR0 registered with the GPU while the controller lives: ordinary
  // memory for the model, I/O memory (cudaHostRegisterIoMemory) for a device.
  struct bar_mapping {
    std::byte* base = nullptr;
    bar_mapping() = default;
    bar_mapping(const nvme_bar& bar, bool io_memory, const std::string& name);
    bar_mapping(const bar_mapping&) = delete;
    bar_mapping& operator=(const bar_mapping&) = delete;
    ~bar_mapping();
  };

  // Brings the device at `bar` up over mem_ with opts' queues, checks what
  // it says against what arrays need, and builds the GPU's queue pairs.
  void bring_up(const nvme_bar& bar, nvme_driver_options d, const options& opts,
                std::uint32_t slot_bytes, const std::string& label);
  // The device's side (the BAR, the IOMMU memory, bring-up, the namespace
  // as the controller's file) for the two device constructors.
  void attach(nvme_bar bar, iommu_mapper& mapper, const nvme_target& target, const options& opts,
              std::uint32_t slot_bytes, vfio_dma_options dma);

  // Destroyed in reverse: queues, driver (shuts the device down), memory
  // (GPU registrations, then IOMMU mappings), the BAR's mapping, the device.
  std::unique_ptr<vfio_device> vfio_;
  std::unique_ptr<nvme_model::device> model_;
  std::unique_ptr<bar_mapping> bar_;
  std::unique_ptr<vfio_dma_memory> iommu_;
  std::unique_ptr<dma_memory> mem_;
  std::unique_ptr<nvme_driver> driver_;
  std::unique_ptr<detail::queue_pairs> queues_;
  std::string label_;                    // "nvme-model controller (<file>)", "nvme 0000:65:00.0"
  std::uint64_t bring_up_commands_ = 0;  // admin commands before the first I/O
  bool queue_spread_ = false;
};

}  // namespace warpstore
