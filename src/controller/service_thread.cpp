// The host controller's service units. Each owns a set of queue pairs and
// one io_uring; an engine thread (io_engine.cpp) runs its rounds:
//
//   fetch   read each owned SQ tail doorbell, copy every new SQE, validate it,
//           and queue a READ or WRITE on the io_uring (or complete it at
//           once); a FLUSH waits until every earlier WRITE of its queue has
//           completed, then goes out as an fdatasync;
//   submit  one io_uring_submit for everything queued this round;
//   reap    take every finished read, resubmit short ones, zero-fill past
//           EOF, and (copy_engine) push the whole batch into GPU memory as
//           one launch, without waiting for it;
//   copied  (copy_engine) complete the reads whose copies finished;
//   post    write completions into each CQ as far as the GPU has retired it.
//
// Nothing in a round allocates; every wait is bounded.
//
// The steps live by idea: fetching, checking and posting NVMe commands in
// nvme_commands.cpp, the io_uring in uring_io.cpp, buffered WRITEs in
// write_combiner.cpp, injected faults in fault_injection.cpp.
#include "controller/service_thread.h"

#include <liburing.h>
#include <sys/resource.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "controller/service_common.h"

namespace warpstore {

using host_detail::cpu_relax;
using host_detail::errno_text;
using host_detail::reap_batch;
using host_detail::steady_ns;

host_controller::worker::worker(host_controller& owner, std::uint32_t id,
                                const std::vector<std::uint32_t>& queue_ids, const options& opts)
    : owner_(owner),
      file_(*owner.file_),
      id_(id),
      slot_bytes_(owner.queues_.slot_bytes()),
      capacity_blocks_(owner.file_->capacity_blocks()),
      file_size_(owner.file_->size_bytes()),
      direct_(owner.file_->direct()),
      direct_alignment_(owner.file_->direct_alignment()),
      gpu_pull_(opts.deliver == delivery::gpu_pull),
      drain_timeout_ns_(std::max<std::uint64_t>(opts.timeout_ns, 1'000'000'000ull)),
      faults_(owner.faults_.get()),
      combiner_(owner.combiner_.get()),
      combine_reads_(opts.combine_reads),
      read_ahead_(owner.read_ahead_.get()) {
  const std::uint32_t depth = owner.queues_.depth();
  const std::size_t queue_bytes = std::size_t{depth} * slot_bytes_;
  if (!gpu_pull_) {
    own_staging_ = runtime::make_host_mapped<std::byte>(queue_ids.size() * queue_bytes);
    copies_ = std::make_unique<runtime::copy_stream>();
    copy_batch_.reserve(queue_ids.size() * depth);
    copying_.reserve(queue_ids.size() * depth);
    flights_.reserve(queue_ids.size() * depth);
    upload_batch_.reserve(queue_ids.size() * depth);
  }
  writable_ = owner.file_->writable();
  queues_.resize(queue_ids.size());
  for (std::size_t i = 0; i < queue_ids.size(); ++i) {
    queue_ctx& q = queues_[i];
    q.ref = owner.queues_.view(queue_ids[i]);
    q.index = queue_ids[i];
    q.mask = depth - 1;
    q.read_base = gpu_pull_ ? q.ref.staging : own_staging_.get() + i * queue_bytes;
    q.contexts.resize(depth);
    q.free.reserve(depth);
    q.pending.resize(depth);
    q.generation_writes.assign(depth, 0);
    q.flushes.resize(depth);
    // Stack order: context 0 is handed out first.
    for (std::uint32_t k = depth; k-- > 0;) {
      q.contexts[k].queue = static_cast<std::uint32_t>(i);
      q.contexts[k].index = k;
      q.free.push_back(k);
    }
  }

  int ret = io_uring_queue_init(opts.uring_depth, &ring_, 0);
  // Rings count against RLIMIT_MEMLOCK, and the kernel releases a closed
  // ring's share asynchronously: right after another controller went away a
  // tight limit can be briefly exhausted. Retry for a bounded while.
  for (int attempt = 0; ret == -ENOMEM && attempt < 20; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ret = io_uring_queue_init(opts.uring_depth, &ring_, 0);
  }
  if (ret < 0) {
    std::string hint;
    if (ret == -EPERM || ret == -ENOSYS)
      hint = " (io_uring disabled by sysctl kernel.io_uring_disabled or a seccomp profile?)";
    if (ret == -ENOMEM) {
      rlimit lim{};
      if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
        hint = " (RLIMIT_MEMLOCK is " + std::to_string(lim.rlim_cur) +
               " bytes; io_uring rings count against it: raise it with ulimit -l, or lower "
               "uring_depth / service_threads)";
    }
    throw runtime_error("host controller: io_uring_queue_init(" + std::to_string(opts.uring_depth) +
                        ") failed: " + errno_text(-ret) + hint);
  }
  ring_ready_ = true;
  max_inflight_ = std::min(opts.uring_depth, ring_.sq.ring_entries);
  can_wait_timeout_ = (ring_.features & IORING_FEAT_EXT_ARG) != 0;

  // Registered buffers skip pinning pages on every read. They count against
  // RLIMIT_MEMLOCK, and the kernel may refuse memory it cannot pin: then
  // plain reads are used, slower but correct.
  std::vector<iovec> iov(queues_.size());
  for (std::size_t i = 0; i < queues_.size(); ++i)
    iov[i] = iovec{queues_[i].read_base, queue_bytes};
  registered_buffers_ =
      io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size())) == 0;
  const int fd = file_.fd();
  registered_file_ = io_uring_register_files(&ring_, &fd, 1) == 0;
}

host_controller::worker::~worker() {
  if (ring_ready_) io_uring_queue_exit(&ring_);
}

bool host_controller::worker::round() {
  // Fetch then submit then reap: a page-cache hit completes inside the
  // submit, so its completion goes out in the same round.
  bool progress = fetch();
  progress |= submit();
  progress |= reap();
  progress |= serve_parked();
  progress |= finish_copies();
  progress |= collect_writes();
  progress |= release_held();
  progress |= post();
  flush_counters();
  return progress;
}

void host_controller::worker::wait_briefly(long long ns) {
  // I/O outstanding (ours, or WRITEs at the write thread): wait for a
  // completion, but only briefly, since the GPU may ring a doorbell
  // meanwhile and the write thread does not wake this ring.
  if (inflight_ > 0 && can_wait_timeout_) {
    __kernel_timespec ts{0, ns};
    io_uring_cqe* cqe = nullptr;
    io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);  // -ETIME or a CQE: reap() sees it
  } else {
    cpu_relax();
  }
}

bool host_controller::worker::announced() const {
  return owner_.active_.load(std::memory_order_relaxed) != 0;
}

bool host_controller::worker::released(std::uint64_t since) const {
  const std::uint64_t ended = owner_.ended_ns_.load(std::memory_order_relaxed);
  return owner_.active_.load(std::memory_order_relaxed) == 0 && ended >= since;
}

void host_controller::worker::stopped(std::exception_ptr e) noexcept {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  owner_.record_failure("host controller service thread " + std::to_string(id_) +
                        " stopped: " + what);
  drain();
}

void host_controller::worker::flush_counters() {
  counters& k = owner_.counters_;
  if (n_commands_) k.commands.fetch_add(std::exchange(n_commands_, 0), std::memory_order_relaxed);
  if (n_errors_) k.errors.fetch_add(std::exchange(n_errors_, 0), std::memory_order_relaxed);
  if (n_bytes_) k.bytes.fetch_add(std::exchange(n_bytes_, 0), std::memory_order_relaxed);
  if (n_doorbells_)
    k.doorbells.fetch_add(std::exchange(n_doorbells_, 0), std::memory_order_relaxed);
}

// Waits (bounded) for reads still in flight, so the kernel never writes into
// buffers after they are freed. A second call finds nothing left.
void host_controller::worker::drain() noexcept {
  try {
    flush_counters();
    // Copies still reading our staging finish before it can be freed.
    if (copies_ != nullptr && flights_head_ < flights_.size()) copies_->wait();
    const std::uint64_t end = steady_ns() + drain_timeout_ns_;
    combining_ -= static_cast<std::uint32_t>(to_combine_.size());  // never handed over
    to_combine_.clear();
    to_read_.clear();  // never given to the kernel
    parked_.clear();   // the controller is stopping: they get no completion
    if (unsubmitted_ > 0) io_uring_submit(&ring_);
    while ((inflight_ > 0 || combining_ > 0) && steady_ns() < end) {
      if (combining_ > 0) {
        std::lock_guard<std::mutex> lock(done_mutex_);
        combining_ -= static_cast<std::uint32_t>(done_.size());
        done_.clear();
      }
      if (inflight_ == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      __kernel_timespec ts{0, 1'000'000};
      io_uring_cqe* cqe = nullptr;
      io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      io_uring_cqe* cqes[reap_batch];
      const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, reap_batch);
      for (unsigned i = 0; i < n; ++i) {
        const std::uint64_t data = cqes[i]->user_data;
        if (data == LIBURING_UDATA_TIMEOUT) continue;
        --inflight_;
        // An extent no other unit may wait for: forgotten.
        if ((data & 3u) == 2u) read_ahead_->loaded(static_cast<std::uint32_t>(data >> 2), -ECANCELED);
      }
      io_uring_cq_advance(&ring_, n);
    }
    if (combining_ > 0)
      owner_.record_failure("host controller service thread " + std::to_string(id_) + ": " +
                            std::to_string(combining_) + " writes still in flight at shutdown");
    if (inflight_ > 0) {
      owner_.record_failure("host controller service thread " + std::to_string(id_) + ": " +
                            std::to_string(inflight_) + " reads still in flight at shutdown");
      // Keep our buffers alive: the kernel may still write into them.
      (void)own_staging_.release();
      if (read_ahead_ != nullptr) read_ahead_->leak();
    }
  } catch (...) {
    // Nothing sensible left to do while shutting down.
  }
}

}  // namespace warpstore
