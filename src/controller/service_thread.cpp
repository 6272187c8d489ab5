// The host controller's service threads. Each owns a set of queue pairs and
// one io_uring, and runs a polling loop:
//
//   fetch   read each owned SQ tail doorbell, copy every new SQE, validate it,
//           and queue a READ or WRITE on the io_uring (or complete it at
//           once); a FLUSH waits until every earlier WRITE of its queue has
//           completed, then goes out as an fdatasync;
//   submit  one io_uring_submit for everything queued this round;
//   reap    take every finished read, resubmit short ones, zero-fill past
//           EOF, and (copy_engine) push the whole batch into GPU memory with
//           one wait;
//   post    write completions into each CQ as far as the GPU has retired it.
//
// Nothing in the loop allocates; every wait is bounded.
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

using host_detail::errno_text;
using host_detail::reap_batch;
using host_detail::steady_ns;

namespace {

// Idle rounds spent polling with a pause instruction before yielding the CPU.
constexpr unsigned idle_spin_rounds = 4096;
// With reads in flight and nothing else to do, sleep in the kernel this long
// at most so new doorbells are still seen quickly.
constexpr long long inflight_wait_ns = 10'000;
// After this long without any work, idle threads sleep (worker::idle): long
// while a caller announced activity (a kernel may still submit), briefly
// otherwise, so a library nobody uses gives its cores back to the process.
constexpr std::uint64_t idle_sleep_after_active_ns = 100'000'000;
constexpr std::uint64_t idle_sleep_after_ns = 1'000'000;
// The watching thread (worker 0) sleeps this long at first, doubling up to
// the longest: how late an unannounced command after a pause is seen. After
// a long quiet (nobody has used the controller for a second) its naps grow
// longer still, so idle arrays cost next to nothing; a new array_ref or an
// announced call wakes every thread at once.
constexpr std::uint64_t watch_nap_first_ns = 50'000;
constexpr std::uint64_t watch_nap_longest_ns = 2'000'000;
constexpr std::uint64_t long_quiet_ns = 1'000'000'000;
constexpr std::uint64_t watch_nap_long_quiet_ns = 20'000'000;
// Other sleeping threads wake this often even unasked (a safety net only).
constexpr auto sleeper_timeout = std::chrono::milliseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

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
      combiner_(owner.combiner_.get()) {
  const std::uint32_t depth = owner.queues_.depth();
  const std::size_t queue_bytes = std::size_t{depth} * slot_bytes_;
  if (!gpu_pull_) {
    own_staging_ = runtime::make_host_mapped<std::byte>(queue_ids.size() * queue_bytes);
    copies_ = std::make_unique<runtime::copy_stream>();
    copy_batch_.reserve(queue_ids.size() * depth);
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

void host_controller::worker::run() noexcept {
  try {
    loop();
  } catch (const std::exception& e) {
    owner_.record_failure("host controller service thread " + std::to_string(id_) +
                          " stopped: " + e.what());
  } catch (...) {
    owner_.record_failure("host controller service thread " + std::to_string(id_) +
                          " stopped: unknown exception");
  }
  drain();
}

void host_controller::worker::loop() {
  unsigned idle_rounds = 0;
  std::uint64_t idle_since = 0;
  while (!owner_.stop_.load(std::memory_order_relaxed)) {
    // Fetch then submit then reap: a page-cache hit completes inside the
    // submit, so its completion goes out in the same round.
    bool progress = fetch();
    progress |= submit();
    progress |= reap();
    progress |= collect_writes();
    progress |= release_held();
    progress |= post();
    flush_counters();
    if (progress) {
      idle_rounds = 0;
      watch_nap_ns_ = 0;
      // The watcher found work while others sleep: they may own its queue.
      if (id_ == 0 && owner_.sleepers_.load(std::memory_order_relaxed) != 0)
        owner_.wake_sleepers();
      continue;
    }
    idle(idle_rounds, idle_since);
  }
}

void host_controller::worker::idle(unsigned& idle_rounds, std::uint64_t& idle_since) {
  if (idle_rounds == 0) idle_since = steady_ns();
  ++idle_rounds;
  if (inflight_ > 0 || combining_ > 0) {
    // I/O outstanding (ours, or WRITEs at the write thread): wait for a
    // completion, but only briefly, since the GPU may ring a doorbell
    // meanwhile and the write thread does not wake this ring.
    if (idle_rounds > 64 && can_wait_timeout_) {
      __kernel_timespec ts{0, inflight_wait_ns};
      io_uring_cqe* cqe = nullptr;
      io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);  // -ETIME or a CQE: reap() sees it
    } else {
      cpu_relax();
    }
    return;
  }
  // The last announced call ended after this thread's last work: its caller
  // said it is done, and nothing new has come since. Sleep now rather than
  // poll beside the caller's own threads (the watcher still sees a command
  // nobody announced within its first naps).
  const std::uint64_t ended = owner_.ended_ns_.load(std::memory_order_relaxed);
  const bool released = owner_.active_.load(std::memory_order_relaxed) == 0 && ended >= idle_since;
  if (idle_rounds < idle_spin_rounds && !released) {
    cpu_relax();
    return;
  }
  // The watcher, awake but idle, still looks after sleeping owners' queues.
  if (id_ == 0 && idle_rounds % 64 == 0 && owner_.sleepers_.load(std::memory_order_relaxed) != 0 &&
      owner_.parked_doorbell_moved())
    owner_.wake_sleepers();
  const bool announced = owner_.active_.load(std::memory_order_relaxed) != 0;
  const std::uint64_t quiet = steady_ns() - idle_since;
  if (!released && quiet < (announced ? idle_sleep_after_active_ns : idle_sleep_after_ns)) {
    std::this_thread::yield();
    return;
  }
  // Woken on purpose: poll again for a while before the next sleep.
  if (sleep(idle_since)) idle_rounds = 0;
}

// Nothing in flight and nothing new for a while: block. Worker 0 keeps
// watching the doorbells of every queue whose owner sleeps, between naps
// that double up to watch_nap_longest_ns, and wakes the rest when one moved;
// begin_activity(), wake() and stop wake everyone at once. Returns whether
// the thread was woken on purpose (not by a timeout).
bool host_controller::worker::sleep(std::uint64_t idle_since) {
  std::unique_lock<std::mutex> lock(owner_.sleep_mutex_);
  if (owner_.stop_.load(std::memory_order_relaxed)) return true;
  const std::uint64_t epoch = owner_.wake_epoch_;
  auto woken = [&] {
    return owner_.wake_epoch_ != epoch || owner_.stop_.load(std::memory_order_relaxed);
  };
  owner_.sleepers_.fetch_add(1, std::memory_order_relaxed);
  if (id_ == 0) {
    const std::uint64_t longest =
        steady_ns() - idle_since < long_quiet_ns ? watch_nap_longest_ns : watch_nap_long_quiet_ns;
    watch_nap_ns_ = watch_nap_ns_ == 0 ? watch_nap_first_ns : std::min(2 * watch_nap_ns_, longest);
    const bool asked = owner_.sleep_cv_.wait_for(lock, std::chrono::nanoseconds(watch_nap_ns_), woken);
    if (asked) watch_nap_ns_ = 0;  // start the naps short again
    owner_.sleepers_.fetch_sub(1, std::memory_order_relaxed);
    lock.unlock();
    if (owner_.parked_doorbell_moved()) owner_.wake_sleepers();
    return asked;
  }
  // Idle means every owned SQ was fetched up to its doorbell: the watcher
  // compares the doorbells with these.
  for (const queue_ctx& q : queues_)
    owner_.parked_tail_[q.index].store(q.sq_head, std::memory_order_relaxed);
  const bool asked = owner_.sleep_cv_.wait_for(lock, sleeper_timeout, woken);
  for (const queue_ctx& q : queues_)
    owner_.parked_tail_[q.index].store(not_parked, std::memory_order_relaxed);
  owner_.sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return asked;
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
// buffers after they are freed.
void host_controller::worker::drain() noexcept {
  try {
    flush_counters();
    const std::uint64_t end = steady_ns() + drain_timeout_ns_;
    combining_ -= static_cast<std::uint32_t>(to_combine_.size());  // never handed over
    to_combine_.clear();
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
      for (unsigned i = 0; i < n; ++i)
        if (cqes[i]->user_data != LIBURING_UDATA_TIMEOUT) --inflight_;
      io_uring_cq_advance(&ring_, n);
    }
    if (combining_ > 0)
      owner_.record_failure("host controller service thread " + std::to_string(id_) + ": " +
                            std::to_string(combining_) + " writes still in flight at shutdown");
    if (inflight_ > 0) {
      owner_.record_failure("host controller service thread " + std::to_string(id_) + ": " +
                            std::to_string(inflight_) + " reads still in flight at shutdown");
      // Keep our buffer alive: the kernel may still write into it.
      (void)own_staging_.release();
    }
  } catch (...) {
    // Nothing sensible left to do while shutting down.
  }
}

}  // namespace warpstore
