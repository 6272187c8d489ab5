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
// The device here is the software NVMe controller (nvme_model.h) over the
// array's file: `controller="nvme-model"`. It is a device in every way the
// data path can see (register file, doorbells, PRP walking, LBA checks,
// queue-full, phase tags, injected faults), so the read and write tests run
// against it as a third controller. A real device through VFIO is not built
// yet: docs/NVME.md says what it needs and what `warpstore nvme doctor`
// checks.
//
// No filesystem sits on a device driven this way: an array addresses the
// namespace's blocks from 0, which for the model are the file's bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "controller/nvme_driver.h"
#include "controller/nvme_model.h"
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
  // Shuts the device down (queues deleted, CC.SHN) before its memory goes.
  ~nvme_controller() override;
  nvme_controller(const nvme_controller&) = delete;
  nvme_controller& operator=(const nvme_controller&) = delete;

  const char* name() const override { return "nvme-model"; }
  io_ref device_ref() const override;
  // commands: I/O commands the device fetched; doorbells: SQ tail doorbell
  // writes of the GPU side. errors and bytes are not counted (the device
  // does not report them; each failed command reaches its caller).
  controller_stats stats() const override;
  // Raises runtime_error once the device reports a fatal status (CSTS.CFS):
  // it executes nothing more, and commands in flight end at their deadline.
  void check() const override;

  // The device (tests and benchmarks inject misbehaviour through it).
  nvme_model::device& model() { return *model_; }
  const nvme_driver& driver() const { return *driver_; }
  const detail::queue_pairs& queues() const { return *queues_; }

 private:
  // Memory the device can reach and kernels can map: pinned host memory,
  // its device address its virtual address (the model's DMA is a memcpy).
  class mapped_dma_memory final : public dma_memory {
   public:
    void* alloc(std::size_t bytes, std::size_t align) override;
    std::uint64_t iova(const void* p) const override;
    void free(void* p) noexcept override;

   private:
    std::mutex mutex_;
    std::unordered_map<void*, void*> bases_;  // handed out -> allocated
  };
  // BAR0 registered with the GPU while the controller lives.
  struct bar_mapping {
    std::byte* base = nullptr;
    bar_mapping() = default;
    explicit bar_mapping(const nvme_bar& bar);
    bar_mapping(const bar_mapping&) = delete;
    bar_mapping& operator=(const bar_mapping&) = delete;
    ~bar_mapping();
  };

  // Destroyed in reverse: queues, driver (shuts the device down), memory,
  // the BAR's mapping, the device.
  std::unique_ptr<nvme_model::device> model_;
  std::unique_ptr<bar_mapping> bar_;
  mapped_dma_memory mem_;
  std::unique_ptr<nvme_driver> driver_;
  std::unique_ptr<detail::queue_pairs> queues_;
  std::uint64_t bring_up_commands_ = 0;  // admin commands before the first I/O
  bool queue_spread_ = false;
};

}  // namespace warpstore
