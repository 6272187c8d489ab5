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
#include "controller/host_controller.h"

#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>

#include "warpstore/runtime.h"

namespace warpstore {

namespace {

// FLUSH may name every namespace at once.
constexpr std::uint32_t nsid_all = 0xFFFFFFFFu;
// The only namespace a warpstore controller exposes.
constexpr std::uint32_t nsid_one = 1;

// io_uring completions taken per peek.
constexpr unsigned reap_batch = 64;
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

inline std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

constexpr nvme::status generic_status(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::generic, code);
}

// Dword 3 (cid, phase, status) as the one 32-bit word both sides access
// atomically; the controller never touches its 16-bit halves.
inline std::uint32_t& completion_dw3_word(nvme::completion& e) {
  return *reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(&e) +
                                           offsetof(nvme::completion, cid));
}

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

}  // namespace

// ---------------------------------------------------------------------------
// Buffered WRITEs of every service thread, executed by one thread. ext4
// runs buffered writes to one file one at a time anyway (the inode lock;
// io_uring hashes them all to one kernel worker), so one thread loses
// nothing, and sorting what is pending by offset merges neighbours into one
// pwritev: evicted lines of a streaming kernel are mostly neighbours, and one
// call per few hundred KiB costs far less than one per line.
class host_controller::write_combiner {
 public:
  struct item {
    worker* owner;
    void* context;  // the owner's command
    std::uint64_t offset;
    const std::byte* data;
    std::uint32_t bytes;
    int result;  // bytes written, or -errno
  };

  write_combiner(host_controller& owner, int fd, std::uint64_t write_behind_bytes)
      : owner_(owner), fd_(fd), write_behind_bytes_(write_behind_bytes) {}
  // Hands over a service thread's round of WRITEs under one lock, so that
  // neighbours fetched together reach the same batch.
  void push(const std::vector<item>& items) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      was_empty = pending_.empty();
      pending_.insert(pending_.end(), items.begin(), items.end());
    }
    if (was_empty) wake_.notify_one();
  }
  // Thread body: runs until stop() with nothing pending.
  void run() noexcept;
  // Write-behind thread body (options::write_behind_bytes): runs until stop().
  void run_behind() noexcept;
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    {
      std::lock_guard<std::mutex> lock(behind_mutex_);
      behind_stopping_ = true;
    }
    behind_wake_.notify_one();
  }

 private:
  void execute(std::vector<item>& batch);
  void write_run(item* first, std::size_t n);

  host_controller& owner_;
  const int fd_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<item> pending_;
  bool stopping_ = false;
  std::vector<iovec> iov_;
  // Write-behind: bytes written since the last start, and the hand-over to
  // its thread.
  const std::uint64_t write_behind_bytes_;
  std::uint64_t unstarted_bytes_ = 0;
  std::mutex behind_mutex_;
  std::condition_variable behind_wake_;
  bool behind_due_ = false;
  bool behind_stopping_ = false;
};

// One service thread and the queues it owns.
class host_controller::worker {
 public:
  worker(host_controller& owner, std::uint32_t id, const std::vector<std::uint32_t>& queue_ids,
         const options& opts);
  ~worker();
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  // Thread body: never throws; a failure is recorded on the owner.
  void run() noexcept;
  bool registered() const { return registered_buffers_; }
  // From the write combiner's thread: these WRITEs of ours are done.
  void writes_done(const write_combiner::item* first, std::size_t n);

 private:
  // One fetched command, from the SQE copy until its completion is posted.
  struct command_ctx {
    nvme::command cmd;
    nvme::opcode op = nvme::opcode::read;
    bool buffered_fd = false;         // O_DIRECT file: a partial last block goes through the buffered fd
    std::uint32_t generation = 0;     // WRITE: flushes fetched before it; FLUSH: its own number
    std::byte* buffer = nullptr;      // where the file's bytes land on the CPU side
    std::uint64_t offset = 0;         // file offset of the first byte
    std::uint32_t length = 0;         // bytes the command transfers
    std::uint32_t file_bytes = 0;     // bytes that exist in the file; the rest reads as zero
    std::uint32_t request_bytes = 0;  // bytes asked of the kernel (O_DIRECT: aligned up)
    std::uint32_t done = 0;           // bytes read so far
    std::uint32_t dw0 = 0;            // completion dword 0: errno of a failed read, write or flush
    fault_action fault;               // what the fault policy made of it (tests)
    bool write_hooked = false;        // WRITE: the policy saw write_starting
    std::uint64_t flush_ticket = 0;   // FLUSH: the policy's flush_starting ticket
    std::uint64_t sync_started = 0;   // FLUSH: steady_ns() when its fdatasync went out
    nvme::status status;
    std::uint32_t queue = 0;  // index into queues_
    std::uint32_t index = 0;  // index into its queue's contexts
  };

  struct queue_ctx {
    queue_pair_ref ref{};
    std::uint32_t index = 0;         // in the controller's queue_pairs
    std::uint32_t mask = 0;          // depth - 1
    std::uint32_t sq_head = 0;       // next SQ index to fetch
    std::uint32_t cq_tail = 0;       // next CQ index to post
    std::uint32_t last_tail = 0;     // SQ tail doorbell value last seen
    bool phase = true;               // phase tag of the current CQ pass
    bool doorbell_fault = false;     // a bad doorbell value was already reported
    std::byte* read_base = nullptr;  // depth * slot_bytes the reads land in
    std::vector<command_ctx> contexts;
    std::vector<std::uint32_t> free;     // stack of free context indices
    std::vector<std::uint32_t> pending;  // ring of contexts waiting to be posted
    std::uint32_t pending_head = 0;
    std::uint32_t pending_count = 0;
    // FLUSH ordering: writes in flight per generation (ring of depth; at most
    // depth generations are live, since each holds a context) and the
    // flushes not yet started, oldest first.
    std::uint32_t generation = 0;
    std::vector<std::uint32_t> generation_writes;
    std::vector<std::uint32_t> flushes;
    std::uint32_t flush_head = 0;
    std::uint32_t flush_count = 0;
  };

  // Round steps; each returns whether it did anything.
  bool fetch();
  bool submit();
  bool reap();
  bool collect_writes();
  bool post();
  void idle(unsigned& idle_rounds, std::uint64_t& idle_since);
  bool sleep(std::uint64_t idle_since);
  void loop();
  std::uint64_t watch_nap_ns_ = 0;  // worker 0's current nap (0: awake)
  void drain() noexcept;

  void start(queue_ctx& q, command_ctx& c);
  void start_flush(queue_ctx& q, command_ctx& c);
  void start_flushes(queue_ctx& q);
  void write_done(command_ctx& c, nvme::status st, std::uint32_t dw0 = 0);
  void queue_io(command_ctx& c);
  void on_result(command_ctx& c, int res);
  void fail_io(command_ctx& c, int err, const char* what);
  void flush_uploads();
  void flush_copies();
  void complete(command_ctx& c, nvme::status st, std::uint32_t dw0 = 0);
  void enqueue_post(command_ctx& c);
  bool inject_fault(command_ctx& c);
  bool release_held();
  io_uring_sqe* next_sqe();
  void flush_counters();

  host_controller& owner_;
  const backing_file& file_;
  std::uint32_t id_;
  std::uint32_t slot_bytes_;
  std::uint64_t capacity_blocks_;
  std::uint64_t file_size_;
  bool direct_;
  std::uint32_t direct_alignment_;
  bool gpu_pull_;
  std::uint64_t drain_timeout_ns_;

  fault_policy* faults_;      // null outside tests
  held_completions held_;    // completions a fault holds back
  std::vector<queue_ctx> queues_;
  std::uint32_t next_queue_ = 0;  // round-robin start of fetch, for fairness

  io_uring ring_{};
  bool ring_ready_ = false;
  bool registered_buffers_ = false;
  bool registered_file_ = false;
  bool can_wait_timeout_ = false;  // the kernel takes a timeout without an SQE
  std::uint32_t max_inflight_ = 0;
  std::uint32_t inflight_ = 0;     // reads submitted to io_uring, not yet reaped
  std::uint32_t unsubmitted_ = 0;  // SQEs prepared since the last submit

  // copy_engine delivery: our own staging and a copy stream into GPU memory.
  runtime::host_mapped_ptr<std::byte> own_staging_;
  std::unique_ptr<runtime::copy_stream> copies_;
  std::vector<command_ctx*> copy_batch_;
  std::vector<command_ctx*> upload_batch_;  // WRITEs whose bytes are being copied from the GPU
  bool writable_;

  // Buffered WRITEs handed to the owner's write combiner (null: none).
  write_combiner* combiner_;
  std::vector<write_combiner::item> to_combine_;  // this round's WRITEs, not yet handed over
  std::uint32_t combining_ = 0;  // handed over (or about to be), result not yet collected
  std::mutex done_mutex_;
  std::vector<write_combiner::item> done_, done_local_;
  std::atomic<bool> done_ready_{false};

  // Counted locally, published once per round.
  std::uint64_t n_commands_ = 0, n_errors_ = 0, n_bytes_ = 0, n_doorbells_ = 0;
};

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

// Copies every new SQE of every owned queue and starts it.
bool host_controller::worker::fetch() {
  bool any = false;
  const std::size_t n = queues_.size();
  for (std::size_t k = 0; k < n; ++k) {
    queue_ctx& q = queues_[(next_queue_ + k) % n];
    const std::uint32_t tail = detail::system_atomic<std::uint32_t>(*q.ref.sq_tail_doorbell)
                                   .load(detail::memory_order_acquire);
    if (tail > q.mask) {
      // An NVMe controller would raise an "invalid doorbell write" event; we
      // ignore the write and say so once.
      if (!q.doorbell_fault) {
        q.doorbell_fault = true;
        owner_.record_failure("host controller: SQ " + std::to_string(q.ref.qid) +
                              " tail doorbell holds " + std::to_string(tail) + ", beyond depth " +
                              std::to_string(q.mask + 1));
      }
      continue;
    }
    std::uint32_t available = (tail - q.sq_head) & q.mask;
    if (available == 0) continue;
    if (tail != q.last_tail) {
      q.last_tail = tail;
      ++n_doorbells_;
    }
    // Stop when contexts or io_uring slots run out; the rest waits in the SQ.
    while (available > 0 && !q.free.empty() && inflight_ + upload_batch_.size() < max_inflight_) {
      command_ctx& c = q.contexts[q.free.back()];
      q.free.pop_back();
      std::memcpy(&c.cmd, q.ref.sq + q.sq_head, sizeof(nvme::command));
      q.sq_head = (q.sq_head + 1) & q.mask;
      --available;
      any = true;
      start(q, c);
    }
  }
  next_queue_ = n == 0 ? 0 : static_cast<std::uint32_t>((next_queue_ + 1) % n);
  flush_uploads();
  return any;
}

// Validates a fetched command and either queues its read or completes it.
void host_controller::worker::start(queue_ctx& q, command_ctx& c) {
  const nvme::command& cmd = c.cmd;
  c.dw0 = 0;
  c.length = 0;
  c.offset = 0;
  c.done = 0;
  c.fault = {};
  c.write_hooked = false;
  const auto op = static_cast<nvme::opcode>(cmd.opc);
  if (cmd.nsid != nsid_one && !(op == nvme::opcode::flush && cmd.nsid == nsid_all))
    return complete(c, generic_status(nvme::sc::invalid_namespace));
  // Fused operations and SGL data pointers are not supported.
  if (cmd.flags != 0) return complete(c, generic_status(nvme::sc::invalid_field));
  c.op = op;
  switch (op) {
    case nvme::opcode::flush:
      // A read-only file has nothing to make durable.
      if (!writable_) return complete(c, nvme::status::ok());
      if (faults_ != nullptr && faults_->covers(op) && inject_fault(c)) return;
      return start_flush(q, c);
    case nvme::opcode::read:
      break;
    case nvme::opcode::write:
      if (!writable_) return complete(c, generic_status(nvme::sc::namespace_write_protected));
      break;
    default:
      return complete(c, generic_status(nvme::sc::invalid_opcode));
  }

  const std::uint32_t blocks = cmd.nlb();
  const std::uint64_t length = std::uint64_t{blocks} << nvme::block_shift;
  if (length > slot_bytes_) return complete(c, generic_status(nvme::sc::invalid_field));
  const std::uint64_t slba = cmd.slba();
  if (slba >= capacity_blocks_ || blocks > capacity_blocks_ - slba)
    return complete(c, generic_status(nvme::sc::lba_out_of_range));

  if (gpu_pull_) {
    // The data must sit in the command's own staging slot: anything else
    // would let one command overwrite (or write out) another's bytes.
    if (cmd.cid > q.mask || cmd.prp1 != reinterpret_cast<std::uint64_t>(
                                            q.ref.staging + std::size_t{cmd.cid} * slot_bytes_))
      return complete(c, generic_status(nvme::sc::invalid_field));
    c.buffer = q.ref.staging + std::size_t{cmd.cid} * slot_bytes_;
  } else {
    if (cmd.prp1 == 0) return complete(c, generic_status(nvme::sc::invalid_field));
    c.buffer = q.read_base + std::size_t{c.index} * slot_bytes_;
  }

  c.offset = slba << nvme::block_shift;
  c.length = static_cast<std::uint32_t>(length);
  // slba < capacity, so the first byte exists; the tail may not.
  c.file_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(length, file_size_ - c.offset));
  c.request_bytes = c.file_bytes;
  c.buffered_fd = false;
  if (direct_ && op == nvme::opcode::write) {
    // A WRITE never grows the file: the bytes of the last block past its
    // end are dropped. An unaligned tail goes through the buffered fd.
    const std::uint64_t a = direct_alignment_ - 1;
    const bool ends_namespace = slba + blocks == capacity_blocks_;
    if (((c.offset | reinterpret_cast<std::uintptr_t>(c.buffer)) & a) != 0 ||
        ((length & a) != 0 && !ends_namespace))
      return complete(c, generic_status(nvme::sc::invalid_field));
    c.buffered_fd = (c.file_bytes & a) != 0;
  } else if (direct_) {
    // O_DIRECT needs aligned offsets, buffers and lengths. A command that
    // ends the namespace may have an unaligned length: it is read rounded up
    // (the kernel stops at EOF) as long as that fits in the slot.
    const std::uint64_t a = direct_alignment_ - 1;
    c.request_bytes = static_cast<std::uint32_t>((c.file_bytes + a) & ~a);
    const bool ends_namespace = slba + blocks == capacity_blocks_;
    if (((c.offset | reinterpret_cast<std::uintptr_t>(c.buffer)) & a) != 0 ||
        ((length & a) != 0 && !ends_namespace) || c.request_bytes > slot_bytes_)
      return complete(c, generic_status(nvme::sc::invalid_field));
  }
  c.done = 0;
  // Faults are injected into the commands the policy covers (reads, unless
  // it models durability too).
  if (op == nvme::opcode::read && faults_ != nullptr && faults_->covers(op) && inject_fault(c))
    return;
  if (op == nvme::opcode::write) {
    c.generation = q.generation;
    ++q.generation_writes[c.generation & q.mask];
    if (faults_ != nullptr) {
      if (faults_->covers(op) && inject_fault(c)) return;
      faults_->write_starting(c.offset, c.file_bytes);
      c.write_hooked = true;
    }
    if (!gpu_pull_) {
      // The bytes are in GPU memory at PRP1: copy them into our buffer first.
      copies_->enqueue_to_host(c.buffer, reinterpret_cast<const void*>(cmd.prp1), c.length);
      upload_batch_.push_back(&c);
      return;
    }
  }
  queue_io(c);
}

// A FLUSH completes only after every WRITE fetched before it: it waits in its
// queue's line until the writes of its generation (and, by the order of the
// line, every earlier one) are done.
void host_controller::worker::start_flush(queue_ctx& q, command_ctx& c) {
  c.generation = q.generation++;
  q.flushes[(q.flush_head + q.flush_count) & q.mask] = c.index;
  ++q.flush_count;
  start_flushes(q);
}

void host_controller::worker::start_flushes(queue_ctx& q) {
  while (q.flush_count > 0 && inflight_ < max_inflight_) {
    command_ctx& f = q.contexts[q.flushes[q.flush_head]];
    if (q.generation_writes[f.generation & q.mask] != 0) return;
    q.flush_head = (q.flush_head + 1) & q.mask;
    --q.flush_count;
    io_uring_sqe* sqe = next_sqe();
    if (faults_ != nullptr) f.flush_ticket = faults_->flush_starting();
    f.sync_started = steady_ns();
    io_uring_prep_fsync(sqe, registered_file_ ? 0 : file_.fd(), IORING_FSYNC_DATASYNC);
    if (registered_file_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, &f);
    ++inflight_;
    ++unsubmitted_;
  }
}

// A WRITE is done (well or not): posts it and lets waiting flushes go.
void host_controller::worker::write_done(command_ctx& c, nvme::status st, std::uint32_t dw0) {
  queue_ctx& q = queues_[c.queue];
  --q.generation_writes[c.generation & q.mask];
  if (c.write_hooked) faults_->write_finished(c.offset, c.file_bytes);
  c.write_hooked = false;
  complete(c, st, dw0);
  start_flushes(q);
}

// copy_engine WRITEs: one wait for every upload fetched this round, then
// their writes go to the io_uring.
void host_controller::worker::flush_uploads() {
  if (upload_batch_.empty()) return;
  bool copied = true;
  try {
    copies_->wait();
  } catch (const std::exception& e) {
    owner_.record_io_error(std::string("copy engine wait (GPU to host, for writes) failed: ") +
                           e.what());
    copied = false;
  }
  for (command_ctx* c : upload_batch_) {
    if (copied)
      queue_io(*c);
    else
      write_done(*c, generic_status(nvme::sc::data_transfer_error));
  }
  upload_batch_.clear();
}

// Asks the fault policy what goes wrong with `c`; true when the fault took
// the command over (it completed with an error, or never will).
bool host_controller::worker::inject_fault(command_ctx& c) {
  c.fault = faults_->before_execute(id_, c.cmd);
  switch (c.fault.kind) {
    case fault_kind::io_error:
      fail_io(c, EIO, "failed (injected fault)");
      return true;
    case fault_kind::stall:
      return true;  // taken from the SQ, never completed: its waiter must time out
    case fault_kind::thread_death:
      throw runtime_error("injected fault at LBA " + std::to_string(c.cmd.slba()));
    default:
      return false;
  }
}

io_uring_sqe* host_controller::worker::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // Cannot happen while inflight_ <= ring entries; submitting frees room.
    io_uring_submit(&ring_);
    unsubmitted_ = 0;
    sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr)
      throw runtime_error("host controller: io_uring submission queue full with " +
                          std::to_string(inflight_) + " reads in flight");
  }
  return sqe;
}

void host_controller::worker::queue_io(command_ctx& c) {
  if (combiner_ != nullptr && c.op == nvme::opcode::write) {
    ++combining_;
    to_combine_.push_back(
        {this, &c, c.offset + c.done, c.buffer + c.done, c.request_bytes - c.done, 0});
    return;
  }
  io_uring_sqe* sqe = next_sqe();
  std::byte* buf = c.buffer + c.done;
  const unsigned len = c.request_bytes - c.done;
  const std::uint64_t off = c.offset + c.done;
  const bool fixed_file = registered_file_ && !c.buffered_fd;
  const int fd = fixed_file ? 0 : c.buffered_fd ? file_.buffered_fd() : file_.fd();
  const auto buf_index = static_cast<int>(c.queue);
  if (c.op == nvme::opcode::write) {
    if (registered_buffers_)
      io_uring_prep_write_fixed(sqe, fd, buf, len, off, buf_index);
    else
      io_uring_prep_write(sqe, fd, buf, len, off);
  } else if (registered_buffers_) {
    io_uring_prep_read_fixed(sqe, fd, buf, len, off, buf_index);
  } else {
    io_uring_prep_read(sqe, fd, buf, len, off);
  }
  if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, &c);
  ++inflight_;
  ++unsubmitted_;
}

bool host_controller::worker::submit() {
  if (!to_combine_.empty()) {
    combiner_->push(to_combine_);
    to_combine_.clear();
  }
  if (unsubmitted_ == 0) return false;
  const int ret = io_uring_submit(&ring_);
  if (ret >= 0) {
    unsubmitted_ -= std::min<std::uint32_t>(unsubmitted_, static_cast<std::uint32_t>(ret));
    return true;
  }
  // Transient (no memory for requests, completion ring busy, signal): the
  // SQEs stay in the ring and go with the next round's submit.
  if (ret == -EAGAIN || ret == -EBUSY || ret == -EINTR) return false;
  throw runtime_error("host controller: io_uring_submit failed: " + errno_text(-ret));
}

bool host_controller::worker::reap() {
  io_uring_cqe* cqes[reap_batch];
  bool any = false;
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, reap_batch);
    if (n == 0) break;
    any = true;
    for (unsigned i = 0; i < n; ++i) {
      // Older kernels implement wait timeouts with an internal timeout SQE.
      if (cqes[i]->user_data == LIBURING_UDATA_TIMEOUT) continue;
      auto* c = static_cast<command_ctx*>(io_uring_cqe_get_data(cqes[i]));
      const int res = cqes[i]->res;
      --inflight_;
      on_result(*c, res);
    }
    io_uring_cq_advance(&ring_, n);
  }
  flush_copies();
  for (queue_ctx& q : queues_)
    if (q.flush_count > 0) start_flushes(q);
  return any;
}

void host_controller::worker::writes_done(const write_combiner::item* first, std::size_t n) {
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done_.insert(done_.end(), first, first + n);
  }
  done_ready_.store(true, std::memory_order_release);
}

bool host_controller::worker::collect_writes() {
  if (!done_ready_.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done_local_.swap(done_);
    done_ready_.store(false, std::memory_order_relaxed);
  }
  for (const write_combiner::item& it : done_local_) {
    --combining_;
    on_result(*static_cast<command_ctx*>(it.context), it.result);
  }
  done_local_.clear();
  return true;
}

void host_controller::worker::on_result(command_ctx& c, int res) {
  if (c.op == nvme::opcode::flush) {
    owner_.counters_.sync_ns.fetch_add(steady_ns() - c.sync_started, std::memory_order_relaxed);
    if (res < 0) return fail_io(c, -res, "failed");
    if (faults_ != nullptr && !faults_->flush_finished(c.flush_ticket))
      return fail_io(c, EIO, "lost (power cut)");
    return complete(c, nvme::status::ok());
  }
  if (res > 0 && c.fault.kind != fault_kind::none)
    res = static_cast<int>(faults_->on_data(c.fault, static_cast<std::uint32_t>(res),
                                            c.request_bytes, c.done == 0));
  if (res < 0) {
    if (res == -EAGAIN || res == -EINTR) return queue_io(c);
    return fail_io(c, -res, "failed");
  }
  if (res == 0 && c.done < c.file_bytes)
    return fail_io(c, EIO, c.op == nvme::opcode::write ? "wrote nothing"
                                                       : "hit end of file early (file shrank?)");
  c.done += static_cast<std::uint32_t>(res);
  if (c.done < c.file_bytes) {
    // A short transfer: ask for the rest. O_DIRECT can only continue from an
    // aligned point.
    if (direct_ && !c.buffered_fd && (c.done & (direct_alignment_ - 1)) != 0)
      return fail_io(c, EIO, "returned an unaligned short count under O_DIRECT");
    return queue_io(c);
  }
  if (c.op == nvme::opcode::write) return write_done(c, nvme::status::ok());
  // Blocks past the end of the file read as zeros.
  if (c.file_bytes < c.length) std::memset(c.buffer + c.file_bytes, 0, c.length - c.file_bytes);
  if (gpu_pull_) return complete(c, nvme::status::ok());
  copy_batch_.push_back(&c);
}

void host_controller::worker::fail_io(command_ctx& c, int err, const char* what) {
  const char* name = c.op == nvme::opcode::write   ? "write"
                     : c.op == nvme::opcode::flush ? "flush (fdatasync)"
                                                   : "read";
  owner_.record_io_error(std::string(name) + " of " + std::to_string(c.length) +
                         " bytes at offset " + std::to_string(c.offset + c.done) + " of '" +
                         file_.path() + "' " + what + ": " + errno_text(err));
  const auto dw0 = static_cast<std::uint32_t>(err);
  if (c.op == nvme::opcode::read)
    return complete(c, nvme::status::make(nvme::status_type::media, nvme::sc::unrecovered_read),
                    dw0);
  const nvme::status fault = nvme::status::make(nvme::status_type::media, nvme::sc::write_fault);
  if (c.op == nvme::opcode::write) return write_done(c, fault, dw0);
  complete(c, fault, dw0);
}

// copy_engine: push every finished read of this round into GPU memory, wait
// once, and only then let their completions go out.
void host_controller::worker::flush_copies() {
  if (copy_batch_.empty()) return;
  const nvme::status transfer_error = generic_status(nvme::sc::data_transfer_error);
  std::size_t enqueued = 0;
  for (command_ctx* c : copy_batch_) {
    try {
      copies_->enqueue_to_device(reinterpret_cast<void*>(c->cmd.prp1), c->buffer, c->length);
      copy_batch_[enqueued++] = c;
    } catch (const std::exception& e) {
      char prp1[24];
      std::snprintf(prp1, sizeof prp1, "0x%llx", static_cast<unsigned long long>(c->cmd.prp1));
      owner_.record_io_error("copy of " + std::to_string(c->length) + " bytes to PRP1 " + prp1 +
                             " failed: " + e.what());
      complete(*c, transfer_error);
    }
  }
  copy_batch_.resize(enqueued);
  bool copied = true;
  try {
    copies_->wait();
  } catch (const std::exception& e) {
    owner_.record_io_error(std::string("copy engine wait failed: ") + e.what());
    copied = false;
  }
  for (command_ctx* c : copy_batch_) complete(*c, copied ? nvme::status::ok() : transfer_error);
  copy_batch_.clear();
}

void host_controller::worker::complete(command_ctx& c, nvme::status st, std::uint32_t dw0) {
  c.status = st;
  c.dw0 = dw0;
  if (c.fault.hold_ns != 0)
    return held_.hold(c.queue, c.index, steady_ns() + std::exchange(c.fault.hold_ns, 0));
  enqueue_post(c);
}

bool host_controller::worker::release_held() {
  if (held_.empty()) return false;
  return held_.release_due(steady_ns(), [this](std::uint32_t queue, std::uint32_t context) {
    enqueue_post(queues_[queue].contexts[context]);
  });
}

void host_controller::worker::enqueue_post(command_ctx& c) {
  queue_ctx& q = queues_[c.queue];
  q.pending[(q.pending_head + q.pending_count) & q.mask] = c.index;
  ++q.pending_count;
}

// Posts pending completions as far as each CQ has room. Never overwrites an
// entry the GPU has not retired (head from the CQ head doorbell).
bool host_controller::worker::post() {
  bool any = false;
  for (queue_ctx& q : queues_) {
    if (q.pending_count == 0) continue;
    const std::uint32_t head = detail::system_atomic<std::uint32_t>(*q.ref.cq_head_doorbell)
                                   .load(detail::memory_order_acquire);
    if (head > q.mask) {
      if (!q.doorbell_fault) {
        q.doorbell_fault = true;
        owner_.record_failure("host controller: CQ " + std::to_string(q.ref.qid) +
                              " head doorbell holds " + std::to_string(head) + ", beyond depth " +
                              std::to_string(q.mask + 1));
      }
      continue;
    }
    const std::uint32_t used = (q.cq_tail - head) & q.mask;
    std::uint32_t room = q.mask - used;  // one entry always stays empty
    while (room > 0 && q.pending_count > 0) {
      command_ctx& c = q.contexts[q.pending[q.pending_head]];
      q.pending_head = (q.pending_head + 1) & q.mask;
      --q.pending_count;
      --room;

      nvme::completion& e = q.ref.cq[q.cq_tail];
      // Relaxed word stores: a retirer may read the entry (dwords 2 and 3 in
      // one load) while it is rewritten; dword 3, stored last with release,
      // says when the rest is valid.
      auto* words = reinterpret_cast<std::uint32_t*>(&e);
      detail::system_atomic<std::uint32_t>(words[0]).store(c.dw0, detail::memory_order_relaxed);
      detail::system_atomic<std::uint32_t>(words[1]).store(0, detail::memory_order_relaxed);
      detail::system_atomic<std::uint32_t>(words[2]).store(
          (q.sq_head & 0xFFFFu) | (static_cast<std::uint32_t>(q.ref.qid) << 16),
          detail::memory_order_relaxed);
      detail::system_atomic<std::uint32_t>(completion_dw3_word(e))
          .store(nvme::completion_dw3(c.cmd.cid, c.status, q.phase), detail::memory_order_release);
      q.cq_tail = (q.cq_tail + 1) & q.mask;
      if (q.cq_tail == 0) q.phase = !q.phase;

      ++n_commands_;
      if (c.status.success())
        n_bytes_ += c.length;
      else
        ++n_errors_;
      q.free.push_back(c.index);
      any = true;
    }
  }
  return any;
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

// ---------------------------------------------------------------------------

void host_controller::write_combiner::run() noexcept {
  std::vector<item> batch;
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !pending_.empty() || stopping_; });
        if (pending_.empty()) return;  // stopping, nothing left
        batch.swap(pending_);
      }
      execute(batch);
      batch.clear();
    }
  } catch (const std::exception& e) {
    owner_.record_failure(std::string("host controller write thread stopped: ") + e.what());
  } catch (...) {
    owner_.record_failure("host controller write thread stopped: unknown exception");
  }
}

// Starts writeback of the whole file's dirty pages each time the write thread
// says enough was written. sync_file_range(WRITE) neither waits for the pages
// nor makes anything durable (FLUSH does, with fdatasync); it only moves the
// disk's work ahead, off the write thread. A failure here is left to the
// fdatasync, which reports writeback errors itself.
void host_controller::write_combiner::run_behind() noexcept {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(behind_mutex_);
      behind_wake_.wait(lock, [this] { return behind_due_ || behind_stopping_; });
      if (behind_stopping_) return;
      behind_due_ = false;
    }
    (void)::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
    owner_.counters_.write_behind_starts.fetch_add(1, std::memory_order_relaxed);
  }
}

// Sorts the batch by offset, writes each run of neighbours with pwritev, and
// hands each run's results back to their service threads.
void host_controller::write_combiner::execute(std::vector<item>& batch) {
  std::sort(batch.begin(), batch.end(),
            [](const item& a, const item& b) { return a.offset < b.offset; });
  owner_.counters_.combined_writes.fetch_add(batch.size(), std::memory_order_relaxed);
  owner_.counters_.write_batches.fetch_add(1, std::memory_order_relaxed);
  constexpr std::size_t max_run_bytes = std::size_t{64} << 20;
  std::size_t i = 0;
  while (i < batch.size()) {
    std::size_t j = i + 1, bytes = batch[i].bytes;
    while (j < batch.size() && j - i < IOV_MAX && bytes + batch[j].bytes <= max_run_bytes &&
           batch[j].offset == batch[j - 1].offset + batch[j - 1].bytes) {
      bytes += batch[j].bytes;
      ++j;
    }
    const std::uint64_t started = steady_ns();
    write_run(&batch[i], j - i);
    owner_.counters_.write_ns.fetch_add(steady_ns() - started, std::memory_order_relaxed);
    owner_.counters_.write_calls.fetch_add(1, std::memory_order_relaxed);
    unstarted_bytes_ += bytes;
    // Back to the owners now, not after the whole batch: a batch can take
    // milliseconds, and GPU warps wait on these completions.
    for (std::size_t k = i; k < j;) {
      std::size_t e = k + 1;
      while (e < j && batch[e].owner == batch[k].owner) ++e;
      batch[k].owner->writes_done(&batch[k], e - k);
      k = e;
    }
    i = j;
  }
  if (write_behind_bytes_ != 0 && unstarted_bytes_ >= write_behind_bytes_) {
    unstarted_bytes_ = 0;
    {
      std::lock_guard<std::mutex> lock(behind_mutex_);
      behind_due_ = true;
    }
    behind_wake_.notify_one();
  }
}

// One pwritev for n neighbouring WRITEs. A failure is attributed command by
// command: what the run wrote counts, the rest is retried one by one.
void host_controller::write_combiner::write_run(item* first, std::size_t n) {
  iov_.resize(n);
  std::size_t total = 0;
  for (std::size_t k = 0; k < n; ++k) {
    iov_[k] = iovec{const_cast<std::byte*>(first[k].data), first[k].bytes};
    total += first[k].bytes;
  }
  std::size_t done = 0, at = 0;  // bytes written; first iovec not fully written
  int err = 0;
  while (done < total) {
    const ssize_t r = ::pwritev(fd_, iov_.data() + at, static_cast<int>(n - at),
                                static_cast<off_t>(first[0].offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      err = r < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(r);
    for (std::size_t left = static_cast<std::size_t>(r); left > 0 && at < n;) {
      if (left >= iov_[at].iov_len) {
        left -= iov_[at].iov_len;
        ++at;
      } else {
        iov_[at].iov_base = static_cast<char*>(iov_[at].iov_base) + left;
        iov_[at].iov_len -= left;
        left = 0;
      }
    }
  }
  std::size_t offset_in_run = 0;
  for (std::size_t k = 0; k < n; ++k) {
    item& it = first[k];
    if (err == 0 || offset_in_run + it.bytes <= done) {
      it.result = static_cast<int>(it.bytes);
    } else {
      // Alone, so its own errno (or short count) is what it reports.
      ssize_t r;
      do {
        r = ::pwrite(fd_, it.data, it.bytes, static_cast<off_t>(it.offset));
      } while (r < 0 && errno == EINTR);
      it.result = r < 0 ? -errno : static_cast<int>(r);
    }
    offset_in_run += it.bytes;
  }
}

namespace {
std::uint32_t queue_count(const options& opts) {
  return opts.queue_pairs != 0 ? opts.queue_pairs : std::min(runtime::processor_count(), 128u);
}
}  // namespace

host_controller::host_controller(std::shared_ptr<backing_file> file, const options& opts,
                                 std::uint32_t slot_bytes, std::shared_ptr<fault_policy> faults)
    : controller(std::move(file)),
      deliver_(opts.deliver),
      queues_(queue_count(opts), opts.queue_depth, slot_bytes, opts.deliver == delivery::gpu_pull,
              opts.timeout_ns) {
  faults_ = std::move(faults);
  if (!file_) throw std::invalid_argument("host controller: no backing file");
  if (opts.service_threads == 0)
    throw std::invalid_argument("host controller: service_threads must be at least 1");
  if (opts.uring_depth == 0 || opts.uring_depth > 32768)
    throw std::invalid_argument("host controller: uring_depth must be 1..32768, got " +
                                std::to_string(opts.uring_depth));
  if (file_->block_device() && file_->direct() && file_->logical_block_size() > slot_bytes)
    throw std::invalid_argument(
        "warpstore: block device '" + file_->path() + "' has " +
        std::to_string(file_->logical_block_size()) + "-byte logical blocks, more than the " +
        std::to_string(slot_bytes) + "-byte cache line: direct I/O cannot read a line; use a line "
        "size (WARPSTORE_LINE_SIZE) of at least " + std::to_string(file_->logical_block_size()) +
        " bytes, or WARPSTORE_DIRECT=off");
  if (slot_bytes > (std::uint32_t{1} << 16) * nvme::block_size)
    throw std::invalid_argument("host controller: slot size " + std::to_string(slot_bytes) +
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

  parked_tail_ = std::make_unique<std::atomic<std::uint32_t>[]>(queues_.count());
  for (std::uint32_t i = 0; i < queues_.count(); ++i) parked_tail_[i].store(not_parked);

  // More threads than queues would have nothing to serve.
  const std::uint32_t threads = std::min(opts.service_threads, queues_.count());
  std::vector<std::vector<std::uint32_t>> owned(threads);
  for (std::uint32_t i = 0; i < queues_.count(); ++i) owned[i % threads].push_back(i);
  try {
    workers_.reserve(threads);
    for (std::uint32_t t = 0; t < threads; ++t) {
      workers_.push_back(std::make_unique<worker>(*this, t, owned[t], opts));
      registered_buffers_ = registered_buffers_ && workers_.back()->registered();
    }
    threads_.reserve(threads);
    for (std::uint32_t t = 0; t < threads; ++t) {
      threads_.emplace_back([w = workers_[t].get()] { w->run(); });
      char name[16];
      std::snprintf(name, sizeof name, "warpstore-io%u", t % 1000);  // 15 characters at most
      pthread_setname_np(threads_.back().native_handle(), name);
    }
  } catch (...) {
    stop_threads();
    throw;
  }
}

host_controller::~host_controller() {
  stop_threads();
}

void host_controller::begin_activity() {
  if (active_.fetch_add(1, std::memory_order_relaxed) == 0) wake_sleepers();
}

void host_controller::end_activity() {
  if (active_.fetch_sub(1, std::memory_order_relaxed) == 1)
    ended_ns_.store(steady_ns(), std::memory_order_relaxed);
}

void host_controller::wake() {
  if (sleepers_.load(std::memory_order_relaxed) != 0) wake_sleepers();
}

bool host_controller::parked_doorbell_moved() const {
  for (std::uint32_t i = 0; i < queues_.count(); ++i) {
    const std::uint32_t parked = parked_tail_[i].load(std::memory_order_relaxed);
    if (parked == not_parked) continue;
    const std::uint32_t tail = detail::system_atomic<std::uint32_t>(*queues_.view(i).sq_tail_doorbell)
                                   .load(detail::memory_order_relaxed);
    if (tail != parked) return true;
  }
  return false;
}

void host_controller::wake_sleepers() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    ++wake_epoch_;
  }
  sleep_cv_.notify_all();
}

void host_controller::stop_threads() noexcept {
  stop_.store(true, std::memory_order_relaxed);
  try {
    wake_sleepers();
  } catch (...) {
    // A sleeper wakes by its timeout (at most sleeper_timeout) and sees stop_.
  }
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  // After the workers: their drain waits for the writes they handed over.
  if (combiner_) combiner_->stop();
  if (combiner_thread_.joinable()) combiner_thread_.join();
  if (behind_thread_.joinable()) behind_thread_.join();
}

io_ref host_controller::device_ref() const {
  return io_ref{io_kind::queues, queues_.device_ref(), {}};
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
  return s;
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
