// The process's I/O engine: one pool of service threads that every host
// controller in the process shares. A controller hands the engine its
// service units (each owns some of its queue pairs, an io_uring and its
// staging); each engine thread runs rounds over the units it was given and
// sleeps when none of them has anything in flight, so a hundred open arrays
// cost the threads of one, and busy arrays never add threads beyond the pool.
//
// The pool lives while some controller holds it: the first controller
// starts it, the last one stops it. A forked child never uses its parent's
// pool (its threads did not cross fork()): it starts its own. fork() waits
// for every engine thread to finish the round it is in (a pthread_atfork
// handler), so the child never inherits a lock an engine thread held.
// Private to src/controller/.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace warpstore::host_detail {

// One unit of service work, called by exactly one engine thread at a time.
class service_unit {
 public:
  virtual ~service_unit() = default;
  // One pass over the unit's queues: fetch, submit, reap, post. True if
  // anything moved. May throw: the engine then calls stopped() and drops
  // the unit.
  virtual bool round() = 0;
  // I/O outstanding: the thread polls (and waits briefly) rather than sleep.
  virtual bool busy() const = 0;
  // Blocks at most `ns` for one of the unit's I/O completions.
  virtual void wait_briefly(long long ns) = 0;
  // The unit's owner has a call announced (begin_activity without its end).
  virtual bool announced() const = 0;
  // The owner's last announced call ended at or after `since` (steady ns):
  // its caller said it is done and nothing came since, so sleep at once.
  virtual bool released(std::uint64_t since) const = 0;
  // round() threw `e`: record it on the owner and wind down (never throws).
  virtual void stopped(std::exception_ptr e) noexcept = 0;
};

class io_engine {
 public:
  // The process's engine, started if none runs, with at least `threads`
  // threads (the pool grows to the largest count a controller asks for).
  static std::shared_ptr<io_engine> acquire(unsigned threads);
  ~io_engine();
  io_engine(const io_engine&) = delete;
  io_engine& operator=(const io_engine&) = delete;

  // One thread, its units and its naps; lives as long as the engine.
  struct lane;
  // Gives `unit` to the least-loaded thread not in `avoid` (where one is
  // left), and returns that thread.
  lane* attach(service_unit* unit, const std::vector<lane*>& avoid);
  // Takes `unit` off `l` (where attach put it); returns once no engine thread
  // runs it or will again.
  void detach(service_unit* unit, lane* l);
  // Thread `l` stops napping and polls again (new work announced). No lock
  // unless it naps: callers may wake on every kernel launch.
  static void wake(lane* l);
  unsigned threads() const;

 private:
  io_engine() = default;
  void grow(unsigned threads);
  // fork(): hold (or give back) the engine's lock and every thread's round.
  void quiesce(bool hold) noexcept;
  static void before_fork() noexcept;
  static void after_fork_in_parent() noexcept;
  static void after_fork_in_child() noexcept;
  void run(lane& l);

  mutable std::mutex mutex_;  // guards lanes_ (growth) against attach
  std::vector<std::unique_ptr<lane>> lanes_;
};

}  // namespace warpstore::host_detail
