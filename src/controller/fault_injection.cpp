// Fault injection around a service thread's commands (tests, the reliability
// study): asks the fault policy (fault_policy.h) what goes wrong with a
// command, and lets completions a fault held back go out when due. Without a
// policy no fault is injected and nothing is held.
#include <cerrno>
#include <string>

#include "controller/service_common.h"
#include "controller/service_thread.h"

namespace warpstore {

using host_detail::steady_ns;

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

bool host_controller::worker::release_held() {
  if (held_.empty()) return false;
  return held_.release_due(steady_ns(), [this](std::uint32_t queue, std::uint32_t context) {
    enqueue_post(queues_[queue].contexts[context]);
  });
}

}  // namespace warpstore
