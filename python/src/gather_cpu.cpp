// The CPU target: lanes (the calling thread and a process-wide pool of
// threads) run the gather bodies of gather.cuh against the real controllers
// (warp size 1: every lane leads its own group).
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gather.cuh"
#include "gather.h"
#include "warpstore/settings.h"

namespace warpstore::python {

bool target_available() { return true; }

call_slot make_call_slot() {
  call_slot s;
  s.device = new call_record{};
  s.host = s.device;
  return s;
}

void destroy_call_slot(call_slot& s) noexcept {
  delete s.device;
  s = call_slot{};
}

namespace {

// How often the calling thread asks whether to cancel.
constexpr auto poll_period = std::chrono::milliseconds(20);

// The most lanes a gather uses, and the most pool threads the process holds:
// eight a core the process may use (its affinity mask), at most 64. Lanes
// that read through queues wait on their commands, so more lanes than cores
// keep more reads in flight. Once: the mask is read with a system call.
unsigned lane_cap() {
  static const unsigned cap = std::min(64u, 8 * process_cores());
  return cap;
}

// Lanes for n positions, no more than the batch (16 positions a lane at
// least). A gather whose misses are copies from host memory (the memory
// controller) waits on nothing: lanes beyond the cores only contend.
unsigned lane_count(std::uint64_t n, bool waits_on_io) {
  static const unsigned cores = process_cores();
  const unsigned most = waits_on_io ? lane_cap() : std::min(lane_cap(), cores);
  return static_cast<unsigned>(std::clamp<std::uint64_t>(n / 16, 1, most));
}

// One gather's work. Its items go out `grain` at a time through `next` to the
// calling thread and to the pool threads that joined it (one counter per call,
// not a stride per lane: helpers come and go). It lives on the caller's stack;
// the caller returns only once every helper has left it.
struct lane_job {
  void (*item)(void*, std::uint64_t) = nullptr;  // item(body, k)
  void* body = nullptr;
  std::uint64_t n = 0, grain = 1;
  unsigned wanted = 0;  // helpers, besides the caller
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> failed{false};  // a lane threw: take no more items
  std::exception_ptr failure;       // the first; written by the lane that set `failed`
  // Under the pool's mutex:
  unsigned joined = 0, inside = 0;
  bool queued = false;

  // Runs items until none are left, calling between() after each.
  template <class Between>
  void work(Between&& between) noexcept {
    try {
      while (!failed.load(std::memory_order_relaxed)) {
        const std::uint64_t k0 = next.fetch_add(grain, std::memory_order_relaxed);
        if (k0 >= n) return;
        const std::uint64_t end = std::min(n, k0 + grain);
        for (std::uint64_t k = k0; k < end && !failed.load(std::memory_order_relaxed); ++k) {
          item(body, k);
          between();
        }
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }
  void fail(std::exception_ptr e) noexcept {
    if (!failed.exchange(true)) failure = std::move(e);
  }
};

// Asks poll() (which may take the GIL, so only on the calling thread) about
// every poll_period; on a yes, sets the cancel word: the bodies then skip
// what they have not started.
struct canceller {
  std::uint32_t& cancel;
  const interrupt_poll& poll;
  lane_job& job;
  bool done = !poll;  // asked already, or nothing to ask
  std::chrono::steady_clock::time_point due = std::chrono::steady_clock::now() + poll_period;

  void operator()() noexcept {
    if (done || std::chrono::steady_clock::now() < due) return;
    try {
      if (poll()) {
        done = true;
        detail::device_atomic<std::uint32_t>(cancel).store(1, detail::memory_order_relaxed);
      }
    } catch (...) {
      done = true;
      job.fail(std::current_exception());
    }
    due = std::chrono::steady_clock::now() + poll_period;
  }
};

// The process's lanes, shared by every gather: a library in someone else's
// process keeps its threads bounded however many of theirs call, and makes
// none per call. Threads start as concurrent gathers need them, up to
// lane_cap() in all, sleep on a condition variable while no job wants
// helpers, and leave after idle_exit without one. Never destroyed: at exit
// its threads may still be asleep in it, and a forked child must not touch
// its parent's (the threads did not come along, the mutex may be held for
// ever), so the child starts its own.
class lane_pool {
 public:
  static lane_pool& get() {
    // A compare-exchange, not a lock: a lock another thread held at fork()
    // would stay held in the child.
    const pid_t pid = ::getpid();
    lane_pool* p = current.load(std::memory_order_acquire);
    while (p == nullptr || p->pid_ != pid) {
      auto* fresh = new lane_pool(pid);
      if (current.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
      delete fresh;  // another thread of this process made one first: p is it
    }
    return *p;
  }

  // Runs j's items on the calling thread and on up to j.wanted pool threads,
  // polling with `c`; returns once no pool thread is in j.
  void run(lane_job& j, canceller& c) {
    offer(j);
    j.work(c);
    std::unique_lock<std::mutex> lock(m_);
    if (j.queued) {  // no more helpers: the items are gone
      queue_.erase(std::find(queue_.begin(), queue_.end(), &j));
      j.queued = false;
    }
    while (j.inside > 0) {
      if (c.done) {
        left_.wait(lock);
      } else if (left_.wait_until(lock, c.due) == std::cv_status::timeout) {
        lock.unlock();
        c();
        lock.lock();
      }
    }
  }

 private:
  explicit lane_pool(pid_t pid) : pid_(pid) {}

  void offer(lane_job& j) {
    unsigned wake = 0;
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back(&j);
      j.queued = true;
      unsigned wanted = 0;
      for (const lane_job* q : queue_) wanted += q->wanted - q->joined;
      // New threads only for what the idle ones cannot take.
      while (idle_ < wanted && threads_ < lane_cap() && start()) {
      }
      wake = std::min(j.wanted, idle_);
    }
    for (unsigned i = 0; i < wake; ++i) work_.notify_one();
  }

  // Under m_. False where no thread can be had: the calling lane does the rest.
  bool start() noexcept {
    try {
      std::thread t([this] { serve(); });
      pthread_setname_np(t.native_handle(), "warpstore-lane");
      t.detach();
    } catch (...) {
      return false;
    }
    ++threads_;
    ++idle_;
    return true;
  }

  void serve() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      // A thread that found no job for idle_exit leaves: a process that
      // gathered once keeps no threads, and the next burst starts them again.
      if (!work_.wait_for(lock, idle_exit, [this] { return !queue_.empty(); })) {
        --threads_;
        --idle_;
        return;
      }
      lane_job& j = *queue_.front();
      if (++j.joined == j.wanted) {
        queue_.erase(queue_.begin());
        j.queued = false;
      }
      ++j.inside;
      --idle_;
      lock.unlock();
      j.work([] {});
      lock.lock();
      ++idle_;
      if (--j.inside == 0) left_.notify_all();  // j is the caller's again: untouched from here
    }
  }

  static constexpr auto idle_exit = std::chrono::seconds(10);
  static inline std::atomic<lane_pool*> current{nullptr};
  const pid_t pid_;  // the process the threads run in
  std::mutex m_;
  std::condition_variable work_;  // a job was queued
  std::condition_variable left_;  // a helper left its job
  std::vector<lane_job*> queue_;  // jobs still wanting helpers, oldest first
  unsigned threads_ = 0;
  unsigned idle_ = 0;  // threads in no job
};

// Runs body(k) for k in [0, n) on `lanes` lanes (lane_count): the calling thread and
// pool threads. The caller polls between its items and while it waits for the
// helpers; a lane's exception is rethrown here once every lane is done.
template <class Body>
void run_lanes(std::uint64_t n, unsigned lanes, Body body, std::uint32_t& cancel,
               const interrupt_poll& poll) {
  lane_job j;
  j.item = [](void* b, std::uint64_t k) { (*static_cast<Body*>(b))(k); };
  j.body = &body;
  j.n = n;
  // Few fetch_adds on the shared counter, yet an even finish.
  j.grain = std::clamp<std::uint64_t>(n / (16 * std::uint64_t{lanes}), 1, 64);
  j.wanted = lanes - 1;
  canceller c{cancel, poll, j};
  if (j.wanted == 0)
    j.work(c);  // a small gather wakes no thread
  else
    lane_pool::get().run(j, c);
  if (j.failure) std::rethrow_exception(j.failure);
}

template <class W, class I>
void gather_typed(const erased_array& ea, const I* idx, std::uint64_t n, W* out, call_record& rec,
                  const interrupt_poll& poll) {
  array_ref<W> a = static_cast<const array<W>&>(ea.base()).ref();
  a.errors = &rec.errors;
  const std::uint64_t row_words = ea.row_bytes() / sizeof(W);
  const unsigned lanes =
      lane_count(n, std::string_view(ea.base().shared_controller()->name()) != "memory");
  if (row_words == 1)
    run_lanes(
        n, lanes,
        [&](std::uint64_t k) { gather_element(a, idx, out, k, &rec.first_bad, &rec.cancel); },
        rec.cancel, poll);
  else
    run_lanes(
        n, lanes,
        [&](std::uint64_t k) {
          gather_row_lanes(a, detail::warp::active_mask(), true, ea.rows(), row_words, idx, out,
                           k, &rec.first_bad, &rec.cancel, 1, 0);
        },
        rec.cancel, poll);
}

}  // namespace

// The CPU target runs the whole gather at launch: nothing is left to wait for.
void launch_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                   std::uint64_t n, void* out, std::uintptr_t, call_slot& slot,
                   const interrupt_poll& poll, done_hook on_done, bool& queued) {
  call_record& rec = *slot.device;
  rec = fresh_call_record();
  with_word(a.word_bytes(), [&]<class W>() {
    if (index_bytes == 4)
      gather_typed(a, static_cast<const std::int32_t*>(idx), n, static_cast<W*>(out), rec, poll);
    else
      gather_typed(a, static_cast<const std::int64_t*>(idx), n, static_cast<W*>(out), rec, poll);
  });
  queued = true;
  if (on_done.fn != nullptr) on_done.fn(on_done.arg);
}

void wait_gather(const call_slot&, const interrupt_poll&, const late_hook&) {}
bool gather_done(const call_slot&) { return true; }

}  // namespace warpstore::python

namespace warpstore::python {
int current_device() { return -1; }
}  // namespace warpstore::python
