// The process's I/O engine (io_engine.h). Each thread ("lane") loops over
// its units:
//
//   round    every unit fetches, submits, reaps and posts once;
//   busy     some unit has I/O in flight: poll, or wait a few microseconds
//            on that unit's ring;
//   idle     nothing in flight: spin a little, then yield, then nap. Naps
//            start at 50 us and double to 2 ms (20 ms after a second of
//            quiet); after each nap the thread runs one round, which is how a
//            command nobody announced is seen. A caller that announces work
//            (begin_activity, wake) ends the nap at once.
//
// How soon a thread sleeps follows its units' owners: an owner whose caller
// said it is done (end_activity) and sent nothing since lets it nap at once;
// an announced call keeps it polling for 100 ms of quiet; otherwise 1 ms.
#include "controller/io_engine.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "controller/service_common.h"

namespace warpstore::host_detail {

namespace {

// Idle rounds spent polling with a pause instruction before yielding the CPU.
constexpr unsigned idle_spin_rounds = 4096;
// With reads in flight and nothing else to do, wait on a ring this long at
// most so new doorbells are still seen quickly.
constexpr long long inflight_wait_ns = 10'000;
// Quiet before a thread naps: while a call is announced, and otherwise.
constexpr std::uint64_t idle_sleep_after_active_ns = 100'000'000;
constexpr std::uint64_t idle_sleep_after_ns = 1'000'000;
// Naps: the first, the longest, and the longest after a long quiet. The nap
// bounds how late a command nobody announced is seen after a pause.
constexpr std::uint64_t nap_first_ns = 50'000;
constexpr std::uint64_t nap_longest_ns = 2'000'000;
constexpr std::uint64_t long_quiet_ns = 1'000'000'000;
constexpr std::uint64_t nap_long_quiet_ns = 20'000'000;

// The running engine, and the process it belongs to.
std::mutex engine_mutex;
std::weak_ptr<io_engine> engine_instance;
pid_t engine_pid = 0;
// Engines of a parent process, in a forked child: never used, never freed
// (their threads did not come along, so their destructors would wait for
// threads that do not exist).
std::vector<std::shared_ptr<io_engine>>* orphans = nullptr;

void orphan(std::shared_ptr<io_engine> e) {
  if (orphans == nullptr) orphans = new std::vector<std::shared_ptr<io_engine>>;
  orphans->push_back(std::move(e));
}
// fork(): the engine before_fork() quiesced, for the parent's and the
// child's halves. Set and cleared under engine_mutex, which before_fork()
// holds across the fork.
std::shared_ptr<io_engine> forking;

}  // namespace

struct io_engine::lane {
  unsigned index = 0;
  std::mutex mutex;
  // Held by the thread while it is inside a round (not while it naps or
  // waits for a generation). fork() takes every lane's, so no engine thread
  // is halfway through a round, holding a lock of the allocator, of liburing
  // or of a unit, when the child is made.
  std::mutex round_mutex;
  std::condition_variable sleep_cv;  // the thread naps here
  std::condition_variable acked_cv;  // detach() waits here
  std::vector<service_unit*> units;  // under mutex
  std::uint64_t generation = 0;      // under mutex: bumped at every change of units or stop
  std::uint64_t running = 0;         // under mutex: the generation the thread runs
  bool stop = false;                 // under mutex
  std::atomic<std::uint64_t> changed{0};  // generation, read without the lock
  // wake(): bumped always; the lock and notify only while the thread naps.
  std::atomic<std::uint64_t> wake_epoch{0};
  std::atomic<bool> napping{false};
  std::atomic<unsigned> load{0};  // units, for attach's choice
  std::thread thread;
};

void io_engine::before_fork() noexcept {
  engine_mutex.lock();
  if (engine_pid == ::getpid()) forking = engine_instance.lock();
  if (forking) forking->quiesce(true);
}

void io_engine::after_fork_in_parent() noexcept {
  std::shared_ptr<io_engine> e = std::move(forking);
  if (e) e->quiesce(false);
  engine_mutex.unlock();
  // `e` may be the last reference now (another thread closed the last
  // controller meanwhile): the engine then stops here, with no lock held.
}

void io_engine::after_fork_in_child() noexcept {
  if (forking) {
    forking->quiesce(false);  // its locks, for whatever looks at it later
    orphan(std::move(forking));
  }
  engine_mutex.unlock();
}

void io_engine::quiesce(bool hold) noexcept {
  if (hold) {
    mutex_.lock();
    for (auto& l : lanes_) l->round_mutex.lock();
  } else {
    for (auto& l : lanes_) l->round_mutex.unlock();
    mutex_.unlock();
  }
}

std::shared_ptr<io_engine> io_engine::acquire(unsigned threads) {
  static std::once_flag fork_handlers;
  std::call_once(fork_handlers, [] {
    ::pthread_atfork(&io_engine::before_fork, &io_engine::after_fork_in_parent,
                     &io_engine::after_fork_in_child);
  });
  std::lock_guard<std::mutex> lock(engine_mutex);
  std::shared_ptr<io_engine> e = engine_instance.lock();
  if (e && engine_pid != ::getpid()) {
    // A forked child: the parent's threads did not come along. Leave that
    // engine to the parent's controllers (the child never closes them) and
    // start a new one.
    orphan(std::move(e));
    e.reset();
  }
  if (!e) {
    e = std::shared_ptr<io_engine>(new io_engine());
    engine_instance = e;
    engine_pid = ::getpid();
  }
  e->grow(std::max(1u, threads));
  return e;
}

void io_engine::grow(unsigned threads) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (lanes_.size() < threads) {
    auto l = std::make_unique<lane>();
    l->index = static_cast<unsigned>(lanes_.size());
    lane* raw = l.get();
    l->thread = std::thread([this, raw] { run(*raw); });
    char name[16];
    std::snprintf(name, sizeof name, "warpstore-io%u", raw->index % 1000);  // 15 characters at most
    pthread_setname_np(l->thread.native_handle(), name);
    lanes_.push_back(std::move(l));
  }
}

io_engine::~io_engine() {
  // The last controller is gone: every lane is empty.
  for (auto& l : lanes_) {
    {
      std::lock_guard<std::mutex> lock(l->mutex);
      l->stop = true;
      l->changed.store(++l->generation, std::memory_order_release);
    }
    l->sleep_cv.notify_all();
  }
  for (auto& l : lanes_)
    if (l->thread.joinable()) l->thread.join();
}

unsigned io_engine::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<unsigned>(lanes_.size());
}

io_engine::lane* io_engine::attach(service_unit* unit, const std::vector<lane*>& avoid) {
  lane* best = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
      for (auto& l : lanes_) {
        if (pass == 0 && std::find(avoid.begin(), avoid.end(), l.get()) != avoid.end()) continue;
        if (best == nullptr ||
            l->load.load(std::memory_order_relaxed) < best->load.load(std::memory_order_relaxed))
          best = l.get();
      }
    }
  }
  best->load.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(best->mutex);
    best->units.push_back(unit);
    best->changed.store(++best->generation, std::memory_order_release);
  }
  best->sleep_cv.notify_all();
  return best;
}

void io_engine::detach(service_unit* unit, lane* l) {
  std::unique_lock<std::mutex> lock(l->mutex);
  auto it = std::find(l->units.begin(), l->units.end(), unit);
  if (it == l->units.end()) return;  // its round threw: the thread dropped it
  l->units.erase(it);
  l->load.fetch_sub(1, std::memory_order_relaxed);
  const std::uint64_t gen = ++l->generation;
  l->changed.store(gen, std::memory_order_release);
  l->sleep_cv.notify_all();
  // The thread takes the new list between rounds, so it is never inside the
  // unit's round once it runs `gen`. Rounds are short and bounded.
  l->acked_cv.wait(lock, [&] { return l->running >= gen; });
}

void io_engine::wake(lane* l) {
  l->wake_epoch.fetch_add(1, std::memory_order_seq_cst);
  if (!l->napping.load(std::memory_order_seq_cst)) return;
  { std::lock_guard<std::mutex> lock(l->mutex); }  // the napper is in wait, or will see the epoch
  l->sleep_cv.notify_all();
}

void io_engine::run(lane& l) {
  std::vector<service_unit*> units;
  std::uint64_t running = std::numeric_limits<std::uint64_t>::max();
  unsigned idle_rounds = 0;
  std::uint64_t idle_since = steady_ns();
  std::uint64_t nap = 0;
  for (;;) {
    std::unique_lock<std::mutex> in_round(l.round_mutex);  // until the nap, or the next pass
    if (l.changed.load(std::memory_order_acquire) != running) {
      std::lock_guard<std::mutex> lock(l.mutex);
      if (l.stop) return;
      units = l.units;
      running = l.generation;
      l.running = running;
      l.acked_cv.notify_all();
      idle_rounds = 0;  // a new unit: poll it now
      nap = 0;
    }
    const std::uint64_t epoch = l.wake_epoch.load(std::memory_order_seq_cst);
    bool progress = false;
    for (service_unit* u : units) {
      try {
        progress |= u->round();
      } catch (...) {
        u->stopped(std::current_exception());
        std::lock_guard<std::mutex> lock(l.mutex);
        auto it = std::find(l.units.begin(), l.units.end(), u);
        if (it != l.units.end()) {
          l.units.erase(it);
          l.load.fetch_sub(1, std::memory_order_relaxed);
          l.changed.store(++l.generation, std::memory_order_release);
        }
      }
    }
    if (progress) {
      idle_rounds = 0;
      nap = 0;
      continue;
    }
    if (idle_rounds++ == 0) idle_since = steady_ns();
    service_unit* busy = nullptr;
    for (service_unit* u : units)
      if (u->busy()) {
        busy = u;
        break;
      }
    if (busy != nullptr) {
      if (idle_rounds > 64)
        busy->wait_briefly(inflight_wait_ns);
      else
        cpu_relax();
      continue;
    }
    bool released = true, announced = false;
    for (service_unit* u : units) {
      released = released && u->released(idle_since);
      announced = announced || u->announced();
    }
    if (idle_rounds < idle_spin_rounds && !released) {
      cpu_relax();
      continue;
    }
    const std::uint64_t quiet = steady_ns() - idle_since;
    if (!released && quiet < (announced ? idle_sleep_after_active_ns : idle_sleep_after_ns)) {
      std::this_thread::yield();
      continue;
    }
    const std::uint64_t longest = quiet < long_quiet_ns ? nap_longest_ns : nap_long_quiet_ns;
    nap = nap == 0 ? nap_first_ns : std::min(2 * nap, longest);
    in_round.unlock();
    std::unique_lock<std::mutex> lock(l.mutex);
    l.napping.store(true, std::memory_order_seq_cst);
    auto woken = [&] {
      return l.wake_epoch.load(std::memory_order_seq_cst) != epoch || l.generation != running ||
             l.stop;
    };
    bool asked;
    if (units.empty()) {
      l.sleep_cv.wait(lock, woken);  // nothing to watch: only attach or stop ends it
      asked = true;
    } else {
      asked = l.sleep_cv.wait_for(lock, std::chrono::nanoseconds(nap), woken);
    }
    l.napping.store(false, std::memory_order_relaxed);
    if (asked) {
      // Woken on purpose: poll again for a while before the next nap.
      idle_rounds = 0;
      nap = 0;
    }
  }
}

}  // namespace warpstore::host_detail
