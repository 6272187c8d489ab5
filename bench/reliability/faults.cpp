// Fault scenarios: one array over a host controller whose fault policy fails
// commands one way; many reads; then what the host was told, whether any
// wrong value got through, and whether the file opens and reads right again.
#include <chrono>
#include <memory>
#include <random>

#include "bench/reliability/reliability.h"
#include "controller/host_controller.h"
#include "support/pattern.cuh"

namespace warpstore::reliability {

namespace {

// Which commands fail for each kind. Errors hit chosen LBAs and random ones;
// faults that cost a deadline each (stall, thread death) happen once.
fault_plan plan_for(fault_kind kind, std::uint64_t capacity_blocks, const fault_setup& s) {
  fault_plan p;
  p.kind = kind;
  p.seed = s.seed;
  const std::uint64_t blocks_per_line = s.opts.line_size / nvme::block_size;
  switch (kind) {
    case fault_kind::io_error:
    case fault_kind::short_transfer:
      for (std::uint64_t line : {1ull, 7ull, 100ull})
        p.lbas.insert(line * blocks_per_line % capacity_blocks);
      p.probability = 0.002;
      p.max_faults = 64;
      break;
    case fault_kind::stall:
    case fault_kind::thread_death:
      p.probability = 1;
      p.max_faults = 1;
      p.skip_first = 100;
      break;
    case fault_kind::delay:
      p.probability = 0.05;
      p.hold_ns = 2'000'000;
      break;
    case fault_kind::reorder:
      p.probability = 0.3;
      p.hold_ns = 3'000'000;
      break;
    case fault_kind::none:
      break;
  }
  return p;
}

bool is_error_kind(fault_kind k) { return k != fault_kind::delay && k != fault_kind::reorder; }

// Counts right, failed (0) and wrong values.
void classify(const std::vector<std::uint64_t>& indices, const std::vector<std::uint64_t>& values,
              fault_outcome& o) {
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::uint64_t want = tools::pattern_word(indices[k] * 8);
    if (values[k] == want) continue;
    if (values[k] == 0)
      ++o.failed_reads;
    else
      ++o.mismatches;
  }
  o.reads += indices.size();
}

// The host side of a fault: what check() raised, and whether it says enough.
void take_error(const array<std::uint64_t>& a, const planned_faults& faults, fault_outcome& o) {
  try {
    a.check();
  } catch (const io_error& e) {
    o.message = e.what();
    o.errors_recorded = e.count();
    const std::string m = o.message;
    const bool names_all = m.find("element") != std::string::npos &&
                           m.find("LBA") != std::string::npos && !e.status().success();
    bool right_lba = true;
    if (o.kind == fault_kind::io_error || o.kind == fault_kind::short_transfer) {
      // The first error recorded must be one of the commands that failed.
      right_lba = false;
      for (std::uint64_t lba : faults.faulted_lbas()) right_lba = right_lba || lba == e.lba();
    }
    o.error_named = names_all && right_lba && e.index() < a.size();
  } catch (const std::exception& e) {
    // A failure of the controller itself (a service thread died).
    o.message = e.what();
    o.error_named = o.kind == fault_kind::thread_death &&
                    o.message.find("service thread") != std::string::npos &&
                    o.message.find("LBA") != std::string::npos;
    o.errors_recorded = o.error_named ? 1 : 0;
  }
}

}  // namespace

options scenario_options(std::size_t cache_bytes, std::uint32_t queue_pairs,
                         std::uint32_t service_threads, std::uint64_t timeout_ns) {
  options o;
  o.cache_bytes = cache_bytes;
  o.line_size = 4096;
  o.ways = 4;
  o.service_threads = service_threads;
  o.queue_pairs = queue_pairs;
  o.queue_depth = 32;
  o.direct = direct_io::off;
  o.timeout_ns = timeout_ns;
  return o;
}

std::vector<std::uint64_t> random_indices(std::uint64_t count, std::uint64_t reads,
                                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> v(reads);
  for (auto& i : v) i = rng() % count;
  return v;
}

fault_outcome run_fault(fault_kind kind, const fault_setup& s, const reader& read) {
  fault_outcome o;
  o.kind = kind;
  auto file = std::make_shared<backing_file>(s.path, s.opts.direct);
  const std::uint64_t count = file->size_bytes() / 8;
  const std::vector<std::uint64_t> indices = random_indices(count, s.reads, s.seed);
  std::vector<std::uint64_t> values(indices.size());
  auto faults = std::make_shared<planned_faults>(plan_for(kind, file->capacity_blocks(), s));
  // Every wait is bounded by timeout_ns; a stalled queue pair fails its other
  // waiters at once, so the whole run is a few deadlines at most.
  // The bound is loose: a busy CI machine may stretch every deadline.
  const double bound_s = 20 * static_cast<double>(s.opts.timeout_ns) * 1e-9 + 30;
  {
    auto ctl = std::make_shared<host_controller>(file, s.opts, s.opts.line_size, faults);
    array<std::uint64_t> a(std::make_shared<cache>(s.opts), ctl, count, 0, s.opts);
    const auto t0 = std::chrono::steady_clock::now();
    read(a, indices, values);
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.seconds > bound_s) o.hangs = 1;
    classify(indices, values, o);
    take_error(a, *faults, o);
  }  // closed: service threads stop even with commands stalled or a thread dead
  o.injected = faults->injected();
  if (is_error_kind(kind))
    o.detected = o.error_named && o.failed_reads > 0
                     ? std::min(o.injected, o.errors_recorded)
                     : 0;
  else
    o.detected = o.message.empty() && o.failed_reads == 0 ? o.injected : 0;

  // Reopen without faults: the same reads must all come back right.
  array<std::uint64_t> again(s.path, count, s.opts);
  std::vector<std::uint64_t> second(indices.size());
  read(again, indices, second);
  fault_outcome healthy;
  classify(indices, second, healthy);
  bool clean = true;
  try {
    again.check();
  } catch (const std::exception&) {
    clean = false;
  }
  o.reopened = clean && healthy.failed_reads == 0 && healthy.mismatches == 0;
  o.mismatches += healthy.mismatches;
  return o;
}

bench::result fault_result(const fault_outcome& o, const std::string& target) {
  bench::result r;
  // The CPU target's entries carry the plain names (fault.io_error, ...); the GPU's
  // carry ".gpu", so both live in one results file.
  r.name = std::string("fault.") + to_string(o.kind) + (target == "gpu" ? ".gpu" : "");
  r.value = static_cast<double>(o.injected);
  r.unit = "faults";
  r.verified = true;
  r.mismatches = o.mismatches;
  r.params = bench::json::object_builder()
                 .add("target", target)
                 .add("detected", o.detected)
                 .add("hangs", o.hangs)
                 .add("reads", o.reads)
                 .add("failed_reads", o.failed_reads)
                 .add("errors_recorded", o.errors_recorded)
                 .add("error_named", o.error_named)
                 .add("reopened", o.reopened)
                 .add("seconds", bench::round_significant(o.seconds, 3))
                 .add("host_error", o.message)
                 .done();
  return r;
}

}  // namespace warpstore::reliability
