// The host controller object: checks its options, hands its service units
// (service_thread.cpp) to the process's I/O engine (io_engine.cpp), starts
// the write thread (write_combiner.cpp), wakes the engine's threads when
// callers announce activity, takes the units back, and reports stats and
// failures.
#include "controller/host_controller.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "controller/service_common.h"
#include "controller/service_thread.h"
#include "controller/write_combiner.h"
#include "warpstore/runtime.h"

namespace warpstore {

using host_detail::steady_ns;

host_controller::host_controller(std::shared_ptr<backing_file> file, const options& opts,
                                 std::uint32_t slot_bytes, std::shared_ptr<fault_policy> faults)
    : controller(std::move(file)),
      deliver_(opts.deliver),
      queues_(detail::queue_pairs::count_for(opts), opts.queue_depth, slot_bytes,
              opts.deliver == delivery::gpu_pull, opts.timeout_ns) {
  faults_ = std::move(faults);
  queue_spread_ = opts.queue_spread;
  if (!file_) throw invalid_argument("host controller: no backing file");
  if (opts.service_threads == 0)
    throw invalid_argument("host controller: service_threads must be at least 1");
  if (opts.uring_depth == 0 || opts.uring_depth > 32768)
    throw invalid_argument("host controller: uring_depth must be 1..32768, got " +
                                std::to_string(opts.uring_depth));
  if (file_->block_device() && file_->direct() && file_->logical_block_size() > slot_bytes)
    throw invalid_argument(
        "warpstore: block device '" + file_->path() + "' has " +
        std::to_string(file_->logical_block_size()) + "-byte logical blocks, more than the " +
        std::to_string(slot_bytes) + "-byte cache line: direct I/O cannot read a line; use a line "
        "size (WARPSTORE_LINE_SIZE) of at least " + std::to_string(file_->logical_block_size()) +
        " bytes, or WARPSTORE_DIRECT=off");
  if (slot_bytes > (std::uint32_t{1} << 16) * nvme::block_size)
    throw invalid_argument("host controller: slot size " + std::to_string(slot_bytes) +
                                " exceeds the largest NVMe transfer (65536 blocks)");

  // Buffered writes go through one write thread (see write_combiner).
  if (opts.combine_writes && file_->writable() && !file_->direct()) {
    combiner_ = std::make_unique<write_combiner>(*this, file_->fd(), opts.write_behind_bytes);
    combiner_thread_ = std::thread([c = combiner_.get()] { c->run(); });
    pthread_setname_np(combiner_thread_.native_handle(), "warpstore-wr");
    if (opts.write_behind_bytes != 0) {
      behind_thread_ = std::thread([c = combiner_.get()] { c->run_behind(); });
      pthread_setname_np(behind_thread_.native_handle(), "warpstore-wb");
    }
  }

  // Read-ahead: O_DIRECT reads of a read-only file (a buffered file has the
  // kernel's own), where lines are small enough beside an extent to pay.
  if (opts.read_ahead != 0 && file_->direct() && !file_->writable() &&
      std::uint64_t{slot_bytes} * 4 <= opts.read_ahead &&
      opts.read_ahead % std::max<std::uint32_t>(file_->direct_alignment(), 1) == 0)
    read_ahead_ = std::make_unique<host_detail::read_ahead>(
        opts.read_ahead,
        static_cast<std::uint32_t>(std::max<std::size_t>(1, opts.read_ahead_cache / opts.read_ahead)),
        file_->size_bytes(), file_->direct_alignment());

  // More units than queues would have nothing to serve.
  const std::uint32_t units = std::min(opts.service_threads, queues_.count());
  std::vector<std::vector<std::uint32_t>> owned(units);
  for (std::uint32_t i = 0; i < queues_.count(); ++i) owned[i % units].push_back(i);
  try {
    workers_.reserve(units);
    for (std::uint32_t t = 0; t < units; ++t) {
      workers_.push_back(std::make_unique<worker>(*this, t, owned[t], opts));
      registered_buffers_ = registered_buffers_ && workers_.back()->registered();
    }
    engine_ = host_detail::io_engine::acquire(units);
    lanes_.reserve(units);
    for (auto& w : workers_) lanes_.push_back(engine_->attach(w.get(), lanes_));
  } catch (...) {
    stop_units();
    throw;
  }
}

host_controller::~host_controller() {
  stop_units();
}

void host_controller::begin_activity() {
  if (active_.fetch_add(1, std::memory_order_relaxed) == 0) wake_lanes();
}

void host_controller::end_activity() {
  if (active_.fetch_sub(1, std::memory_order_relaxed) == 1)
    ended_ns_.store(steady_ns(), std::memory_order_relaxed);
}

void host_controller::wake() {
  wake_lanes();
}

std::uint64_t host_controller::submission_mark() const {
  // The doorbells only move forward (mod depth); reading them takes no
  // lock and writes nothing the GPU or the service threads use.
  std::uint64_t h = 0;
  for (std::uint32_t i = 0; i < queues_.count(); ++i)
    h = h * 1'000'003 + std::atomic_ref<std::uint32_t>(*queues_.view(i).sq_tail_doorbell)
                            .load(std::memory_order_relaxed);
  return h;
}

void host_controller::wake_lanes() {
  for (host_detail::io_engine::lane* l : lanes_) host_detail::io_engine::wake(l);
}

void host_controller::stop_units() noexcept {
  // Off the engine first (no thread runs a round of theirs afterwards), then
  // drained here: a slow drain holds up this call, not other arrays' I/O.
  for (std::size_t i = 0; i < lanes_.size(); ++i) engine_->detach(workers_[i].get(), lanes_[i]);
  for (auto& w : workers_) w->drain();
  // After the units: their drain waits for the writes they handed over.
  if (combiner_) combiner_->stop();
  if (combiner_thread_.joinable()) combiner_thread_.join();
  if (behind_thread_.joinable()) behind_thread_.join();
}

io_ref host_controller::device_ref() const {
  io_ref r{io_kind::queues, queues_.device_ref(), {}};
  r.queues.spread = queue_spread_;
  return r;
}

controller_stats host_controller::stats() const {
  controller_stats s;
  s.commands = counters_.commands.load(std::memory_order_relaxed);
  s.errors = counters_.errors.load(std::memory_order_relaxed);
  s.bytes = counters_.bytes.load(std::memory_order_relaxed);
  s.doorbells = counters_.doorbells.load(std::memory_order_relaxed);
  s.combined_writes = counters_.combined_writes.load(std::memory_order_relaxed);
  s.write_calls = counters_.write_calls.load(std::memory_order_relaxed);
  s.sync_ns = counters_.sync_ns.load(std::memory_order_relaxed);
  s.write_batches = counters_.write_batches.load(std::memory_order_relaxed);
  s.write_behind_starts = counters_.write_behind_starts.load(std::memory_order_relaxed);
  s.write_ns = counters_.write_ns.load(std::memory_order_relaxed);
  s.combined_reads = counters_.combined_reads.load(std::memory_order_relaxed);
  s.read_runs = counters_.read_runs.load(std::memory_order_relaxed);
  if (read_ahead_ != nullptr) {
    s.read_ahead_loads = read_ahead_->loads();
    s.read_ahead_lines = read_ahead_->lines();
    s.read_ahead_trigger = read_ahead_->trigger();
  }
  return s;
}

void host_controller::forget_file_bytes() {
  if (read_ahead_ != nullptr) read_ahead_->forget();
}

void host_controller::check() const {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(failure_mutex_);
  throw runtime_error(failure_);
}

std::string host_controller::last_io_error() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return last_io_error_;
}

void host_controller::record_failure(const std::string& message) noexcept {
  try {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!failed_.load(std::memory_order_relaxed)) {
      failure_ = message;
      failed_.store(true, std::memory_order_release);
    }
  } catch (...) {
    failed_.store(true, std::memory_order_release);
  }
}

void host_controller::record_io_error(const std::string& message) noexcept {
  try {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    last_io_error_ = message;
  } catch (...) {
  }
}

}  // namespace warpstore
