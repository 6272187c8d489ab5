#include "controller/fault_policy.h"

#include <stdexcept>

#include "warpstore/error.h"

namespace warpstore {

namespace {
constexpr const char* kind_names[fault_kind_count] = {
    "none", "io_error", "short_transfer", "stall", "delay", "reorder", "thread_death"};
}  // namespace

const char* to_string(fault_kind k) {
  const auto i = static_cast<std::uint32_t>(k);
  return i < fault_kind_count ? kind_names[i] : "unknown";
}

fault_kind parse_fault_kind(const std::string& s) {
  for (std::uint32_t i = 0; i < fault_kind_count; ++i)
    if (s == kind_names[i]) return static_cast<fault_kind>(i);
  throw invalid_argument("unknown fault kind '" + s +
                         "' (none, io_error, short_transfer, stall, delay, reorder, "
                         "thread_death)");
}

std::uint32_t fault_policy::on_data(const fault_action& a, std::uint32_t bytes,
                                    std::uint32_t wanted, bool first) const {
  if (a.kind != fault_kind::short_transfer) return bytes;
  // Half of the request, in whole blocks, then the device stops delivering.
  if (!first) return 0;
  const std::uint32_t half = (wanted / 2) & ~(nvme::block_size - 1);
  return bytes < half ? bytes : half;
}

planned_faults::planned_faults(fault_plan plan) : plan_(std::move(plan)), rng_(plan_.seed) {}

bool planned_faults::hits_chosen_lba(const nvme::command& cmd) const {
  if (plan_.lbas.empty()) return false;
  const std::uint64_t first = cmd.slba();
  const auto it = plan_.lbas.lower_bound(first);
  return it != plan_.lbas.end() && *it < first + cmd.nlb();
}

fault_action planned_faults::before_execute(std::uint32_t, const nvme::command& cmd) {
  fault_action a;
  if (plan_.kind == fault_kind::none ||
      cmd.opc != static_cast<std::uint8_t>(nvme::opcode::read))
    return a;
  const std::uint64_t n = commands_.fetch_add(1, std::memory_order_relaxed);
  if (n < plan_.skip_first) return a;
  std::lock_guard<std::mutex> lock(mutex_);
  if (injected_.load(std::memory_order_relaxed) >= plan_.max_faults) return a;
  const bool chosen = hits_chosen_lba(cmd);
  const bool random =
      !chosen && plan_.probability > 0 &&
      std::uniform_real_distribution<double>(0, 1)(rng_) < plan_.probability;
  if (!chosen && !random) return a;
  a.kind = plan_.kind;
  if (a.kind == fault_kind::delay) a.hold_ns = plan_.hold_ns;
  if (a.kind == fault_kind::reorder)
    a.hold_ns = std::uniform_int_distribution<std::uint64_t>(0, plan_.hold_ns)(rng_);
  injected_.fetch_add(1, std::memory_order_relaxed);
  faulted_.push_back(cmd.slba());
  return a;
}

std::vector<std::uint64_t> planned_faults::faulted_lbas() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return faulted_;
}

void held_completions::hold(std::uint32_t queue, std::uint32_t context, std::uint64_t due_ns) {
  held_.push_back({queue, context, due_ns});
}

}  // namespace warpstore
