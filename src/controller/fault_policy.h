// Fault injection for controllers: a policy the host controller consults
// before it executes a command and when the command's data arrives, so tests
// and the reliability study can make storage fail in every way a real device
// does (errors, short transfers, commands that never complete, late and
// reordered completions, a service thread that dies) and check that the
// failure reaches the host as an error, never as a hang or wrong bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "warpstore/nvme.h"

namespace warpstore {

enum class fault_kind : std::uint32_t {
  none = 0,
  io_error,        // the command completes with a media error (unrecovered read)
  short_transfer,  // the read delivers half its bytes, then nothing more
  stall,           // the command is taken and never completed
  delay,           // the completion is held back for a fixed time
  reorder,         // the completion is held back a random time, so later ones overtake it
  thread_death,    // the service thread that fetched the command dies
};
inline constexpr std::uint32_t fault_kind_count = 7;

const char* to_string(fault_kind k);
// "io_error" -> fault_kind::io_error; raises std::invalid_argument otherwise.
fault_kind parse_fault_kind(const std::string& s);

// What goes wrong with one command.
struct fault_action {
  fault_kind kind = fault_kind::none;
  std::uint64_t hold_ns = 0;  // delay, reorder: how long the completion is held
};

// Consulted by a controller's service threads (concurrently: implementations
// are thread-safe).
class fault_policy {
 public:
  virtual ~fault_policy() = default;
  // Before a validated command executes on service thread `thread`.
  virtual fault_action before_execute(std::uint32_t thread, const nvme::command& cmd) = 0;
  // When `bytes` of a read's `wanted` bytes arrived: how many the controller
  // may count (a short transfer counts fewer). `first` is true for the first
  // result of the command.
  virtual std::uint32_t on_data(const fault_action& a, std::uint32_t bytes, std::uint32_t wanted,
                                bool first) const;
  // Which commands before_execute sees: reads only, unless a policy (the
  // power-cut layer) takes writes and flushes too.
  virtual bool covers(nvme::opcode op) const { return op == nvme::opcode::read; }

  // Durability hooks, for a policy that models what storage keeps (the
  // power-cut layer). A WRITE of `bytes` at byte `offset` is about to be
  // executed (nothing of it is in the file yet) / has finished, well or not.
  virtual void write_starting(std::uint64_t offset, std::uint32_t bytes) {
    (void)offset, (void)bytes;
  }
  virtual void write_finished(std::uint64_t offset, std::uint32_t bytes) {
    (void)offset, (void)bytes;
  }
  // A FLUSH's fdatasync is about to start: returns a ticket for
  // flush_finished. When the fdatasync succeeded: whether the FLUSH may
  // complete well (false: it fails, as when power went off meanwhile).
  virtual std::uint64_t flush_starting() { return 0; }
  virtual bool flush_finished(std::uint64_t ticket) {
    (void)ticket;
    return true;
  }
};

// Which commands fail, and how.
struct fault_plan {
  fault_kind kind = fault_kind::none;
  std::set<std::uint64_t> lbas;  // commands whose range holds one of these fail
  double probability = 0;        // and any other command with this probability
  std::uint64_t seed = 1;
  std::uint64_t max_faults = ~0ull;  // faults injected at most
  std::uint64_t hold_ns = 0;         // delay: fixed; reorder: random in [0, hold_ns]
  std::uint64_t skip_first = 0;      // commands let through before any fault
};

// The policy of a fault_plan; counts what it injected.
class planned_faults final : public fault_policy {
 public:
  explicit planned_faults(fault_plan plan);
  fault_action before_execute(std::uint32_t thread, const nvme::command& cmd) override;
  std::uint64_t injected() const { return injected_.load(std::memory_order_relaxed); }
  std::uint64_t commands() const { return commands_.load(std::memory_order_relaxed); }
  // The first LBA of every faulted command, in injection order.
  std::vector<std::uint64_t> faulted_lbas() const;
  const fault_plan& plan() const { return plan_; }

 private:
  bool hits_chosen_lba(const nvme::command& cmd) const;

  fault_plan plan_;
  std::atomic<std::uint64_t> injected_{0};
  std::atomic<std::uint64_t> commands_{0};
  mutable std::mutex mutex_;
  std::mt19937_64 rng_;
  std::vector<std::uint64_t> faulted_;
};

// Completions a service thread holds back (delay, reorder) until they are
// due. Identified by (queue, context) indices of the thread's own tables.
class held_completions {
 public:
  void hold(std::uint32_t queue, std::uint32_t context, std::uint64_t due_ns);
  bool empty() const { return held_.empty(); }
  // Calls release(queue, context) for every completion due at `now_ns` (in
  // no particular order); returns whether any was.
  template <class Release>
  bool release_due(std::uint64_t now_ns, Release&& release) {
    bool any = false;
    for (std::size_t i = 0; i < held_.size();) {
      if (held_[i].due_ns > now_ns) {
        ++i;
        continue;
      }
      const entry e = held_[i];
      held_[i] = held_.back();
      held_.pop_back();
      release(e.queue, e.context);
      any = true;
    }
    return any;
  }

 private:
  struct entry {
    std::uint32_t queue, context;
    std::uint64_t due_ns;
  };
  std::vector<entry> held_;
};

}  // namespace warpstore
