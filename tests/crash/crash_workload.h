// Crash testing: a workload that commits states to storage, is
// killed (kill -9) or loses power at a random instant, and must then recover
// to exactly one committed state, never older than the last commit that was
// acknowledged. The driver (crash_main.cpp, `warpstore-crash`) runs the
// trials; each workload implements this interface once, for the CPU target
// and the GPU target alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "warpstore/controller.h"
#include "warpstore/settings.h"

namespace warpstore::crash {

// Opens the controller a workload writes through. Kill trials: the plain
// make_controller. Power-cut trials: a host controller whose writes since the
// last durable point live in a volatile layer the cut discards.
using open_fn = std::function<std::shared_ptr<controller>(const std::string& path, const options&)>;

struct env {
  std::string dir;  // the workload's files live here (created by the driver)
  options opts;     // controller, line size, cache, writable = true
  open_fn open;     // use it for every file the workload writes
  std::uint64_t seed = 1;
};

// Called after each commit returned (the state is durable): the driver records
// it as acknowledged. Cheap; may be called from any host thread.
using committed_fn = std::function<void(std::uint64_t state)>;

struct verdict {
  std::uint64_t state = 0;       // the committed state recovery found
  std::uint64_t mismatches = 0;  // bytes / records differing from that state's expected content
  std::string detail;            // what differed (empty when nothing)
};

class workload {
 public:
  virtual ~workload() = default;
  virtual const char* name() const = 0;
  // Creates the workload's files in env.dir; state 0 is committed.
  virtual void prepare(const env& e) = 0;
  // Commits states 1, 2, ... up to `states`, calling `committed(k)` after
  // commit k returned. Raises when storage fails (a power cut makes every
  // later command fail).
  virtual void run(const env& e, std::uint64_t states, const committed_fn& committed) = 0;
  // After a crash: recovers (recovery itself must be safe to interrupt and
  // rerun) and checks the files hold exactly one committed state, with every
  // byte that state must have.
  virtual verdict recover(const env& e) = 0;
};

// The workloads, one definition per target (CPU library / GPU library).
std::unique_ptr<workload> make_checkpoint_workload();  // PageRank, checkpoint every N iterations
std::unique_ptr<workload> make_kv_workload();          // key-value store, batched SET/GET with the log

}  // namespace warpstore::crash
