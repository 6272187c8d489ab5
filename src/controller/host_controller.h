// The `host` controller: service units, run by the threads of the process's
// shared I/O engine (io_engine.h), poll the submission doorbells of the queue
// pairs, execute the NVMe commands against a file or block device with
// io_uring, deliver the bytes (into pinned staging the GPU copies from, or
// with the copy engine straight into GPU memory) and post the completions.
// The GPU initiates every request; the CPU only executes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "controller/fault_policy.h"
#include "controller/io_engine.h"
#include "controller/read_ahead.h"
#include "warpstore/controller.h"
#include "warpstore/detail/queue_pairs.h"
#include "warpstore/settings.h"

namespace warpstore {

class host_controller final : public controller {
 public:
  // `slot_bytes` is the largest transfer one command may carry (the cache
  // line size). Raises warpstore::runtime_error if io_uring cannot be set up.
  // `faults` (tests, the reliability study) decides which commands fail.
  host_controller(std::shared_ptr<backing_file> file, const options& opts,
                  std::uint32_t slot_bytes, std::shared_ptr<fault_policy> faults = nullptr);
  ~host_controller() override;
  host_controller(const host_controller&) = delete;
  host_controller& operator=(const host_controller&) = delete;

  const char* name() const override { return "host"; }
  io_ref device_ref() const override;
  controller_stats stats() const override;
  // Raises warpstore::runtime_error with the first failure of a service
  // unit (it stopped; the queues it served get no more completions).
  void check() const override;
  void forget_file_bytes() override;  // read-ahead's extents
  void begin_activity() override;
  void end_activity() override;
  bool announces_activity() const override { return true; }
  void wake() override;
  std::uint64_t submission_mark() const override;

  // True when every service thread reads into io_uring registered buffers;
  // false when registration failed (RLIMIT_MEMLOCK, memory the kernel cannot
  // pin) and plain reads are used instead.
  bool registered_buffers() const { return registered_buffers_; }
  // The engine threads this controller's units run on (its service units:
  // options::service_threads, at most one per queue pair), and the engine's
  // whole pool, which every host controller of the process shares.
  std::uint32_t engine_threads() const { return engine_->threads(); }
  // The most recent failed read or copy, with path, offset and errno text
  // (empty if none). The failing command's completion carries the errno in
  // dword 0.
  std::string last_io_error() const;
  delivery deliver() const { return deliver_; }
  std::uint32_t service_threads() const { return static_cast<std::uint32_t>(workers_.size()); }
  const detail::queue_pairs& queues() const { return queues_; }

 private:
  class worker;
  friend class worker;
  class write_combiner;

  struct counters {
    std::atomic<std::uint64_t> commands{0};
    std::atomic<std::uint64_t> errors{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> doorbells{0};
    std::atomic<std::uint64_t> combined_writes{0};
    std::atomic<std::uint64_t> write_calls{0};
    std::atomic<std::uint64_t> sync_ns{0};
    std::atomic<std::uint64_t> write_batches{0};
    std::atomic<std::uint64_t> write_behind_starts{0};
    std::atomic<std::uint64_t> write_ns{0};
    std::atomic<std::uint64_t> combined_reads{0};
    std::atomic<std::uint64_t> read_runs{0};
  };

  // Records the first failure outside any one command; check() raises it.
  void record_failure(const std::string& message) noexcept;
  void record_io_error(const std::string& message) noexcept;
  // Takes the units off the engine, drains them, stops the write threads.
  void stop_units() noexcept;
  // The engine threads that run our units stop napping.
  void wake_lanes();

  delivery deliver_;
  detail::queue_pairs queues_;
  counters counters_;
  // active_ counts the begin_activity calls not yet ended; the engine's
  // threads read it (and ended_ns_) to decide how soon to nap.
  std::atomic<std::uint32_t> active_{0};
  std::atomic<std::uint64_t> ended_ns_{0};  // steady clock when active_ last fell to 0
  mutable std::mutex failure_mutex_;
  std::string failure_;
  std::string last_io_error_;
  std::atomic<bool> failed_{false};
  bool registered_buffers_ = true;
  bool queue_spread_ = false;  // options::queue_spread
  std::shared_ptr<fault_policy> faults_;
  // Buffered WRITEs of every worker (null: each worker writes through its
  // io_uring). Stops after the workers, so their drain sees their writes end.
  std::unique_ptr<write_combiner> combiner_;
  std::thread combiner_thread_;
  std::thread behind_thread_;  // write-behind (options::write_behind_bytes)
  // Extents read ahead (options::read_ahead; null: off). Outlives the units,
  // whose reads land in it.
  std::unique_ptr<host_detail::read_ahead> read_ahead_;
  // The engine that runs the units, and the engine thread of each unit.
  std::shared_ptr<host_detail::io_engine> engine_;
  std::vector<host_detail::io_engine::lane*> lanes_;  // lanes_[i] runs workers_[i]
  // Declared last: detached and drained before anything they use goes away.
  std::vector<std::unique_ptr<worker>> workers_;
};

}  // namespace warpstore
