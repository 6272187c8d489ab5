// The power-cut layer: a fault policy for the host controller that models a
// drive with a volatile write cache, so crash tests can cut the power at any
// instant and check that what software calls committed survives.
//
// Every WRITE the controller executes goes to the file as usual (reads see
// it, as a drive's cache serves reads), but the layer first keeps the
// pre-image of each 512-byte block the write covers. A FLUSH whose fdatasync
// completes makes durable every write that had finished before the FLUSH
// started: their pre-images are dropped. power_off() stops the drive: every
// later command fails with an I/O error (a FLUSH still in flight fails too,
// so nothing is acknowledged after the cut). cut() then decides, once the
// controller is gone, what the medium kept: for each block written since its
// last durable point, independently, either the newest write or any older
// un-flushed version back to the durable one, chosen at random; `loss` = 1
// loses every un-flushed write. Blocks tear at 512 bytes, as an NVMe drive
// with an atomic write unit of one block may.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "controller/fault_policy.h"
#include "warpstore/controller.h"

namespace warpstore {

class powercut_layer final : public fault_policy {
 public:
  explicit powercut_layer(std::shared_ptr<backing_file> file);

  bool covers(nvme::opcode op) const override;
  fault_action before_execute(std::uint32_t thread, const nvme::command& cmd) override;
  void write_starting(std::uint64_t offset, std::uint32_t bytes) override;
  void write_finished(std::uint64_t offset, std::uint32_t bytes) override;
  std::uint64_t flush_starting() override;
  bool flush_finished(std::uint64_t ticket) override;

  // From now on every command fails and no FLUSH completes well.
  void power_off();
  bool powered() const { return !off_.load(std::memory_order_acquire); }

  struct cut_result {
    std::uint64_t volatile_blocks = 0;  // blocks with writes not yet durable
    std::uint64_t reverted = 0;         // of those, blocks set back to an older version
  };
  // What the medium kept: call after power_off() and after the controller
  // using this layer is destroyed (its service threads joined). Each
  // volatile block keeps its newest version with probability 1 - `loss`,
  // else one of its older versions back to the durable one, uniformly;
  // `loss` = 1 takes every block back to its durable version.
  // Writes the chosen versions to the file with pwrite (no fsync: the test's
  // recovery reads through the page cache). Raises on I/O errors.
  cut_result cut(std::uint64_t seed, double loss);

  // Blocks with writes not yet durable, now.
  std::uint64_t volatile_blocks() const;

  // Called after each WRITE's pre-images are kept, outside the layer's lock
  // (it may power this layer off): a crash test cuts the power at a chosen
  // WRITE with it. Set before the controller runs.
  void on_write(std::function<void()> hook) { on_write_ = std::move(hook); }

 private:
  static constexpr std::uint32_t block = 512;
  // One un-flushed write of a block: the bytes the block held before it.
  struct version {
    std::vector<std::byte> before;
    std::uint64_t finished = 0;  // ticket when the write finished; 0 while in flight
  };
  std::shared_ptr<backing_file> file_;
  std::atomic<bool> off_{false};
  mutable std::mutex mutex_;
  std::uint64_t clock_ = 1;  // ticks at every finished write and started flush
  std::map<std::uint64_t, std::vector<version>> blocks_;  // block index -> un-flushed writes, oldest first
  std::function<void()> on_write_;
};

}  // namespace warpstore
