// The reliability study: storage that fails on purpose, inputs that
// are wrong on purpose, and what warpstore makes of them. The scenarios are
// plain host code; only how elements are read differs between the CPU target
// (std::thread lanes) and the GPU (a kernel), so each target passes a reader.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "controller/fault_policy.h"
#include "support/args.h"
#include "support/results.h"
#include "warpstore/array.cuh"

namespace warpstore::reliability {

// Reads element indices[k] of `a` into out[k] (failed reads give 0, as
// array_ref's operator[] does), then returns; must not wait forever.
using reader = std::function<void(const array<std::uint64_t>& a,
                                  const std::vector<std::uint64_t>& indices,
                                  std::vector<std::uint64_t>& out)>;

// Stores values[k] at element indices[k] (store(), several lanes), or with
// `span` writes every value from element indices[0] on in one write_span;
// must not wait forever.
using writer = std::function<void(const array<std::uint64_t>& a,
                                  const std::vector<std::uint64_t>& indices,
                                  const std::vector<std::uint64_t>& values, bool span)>;

struct fault_setup {
  std::string path;          // a tools::pattern file
  options opts;              // host controller options (timeout_ns bounds every wait)
  std::uint64_t reads = 0;   // random element reads per scenario
  std::uint64_t seed = 1;
};

// What one fault kind did.
struct fault_outcome {
  fault_kind kind = fault_kind::none;
  std::uint64_t injected = 0;    // faults the policy injected
  std::uint64_t detected = 0;    // of those, handled right: reported as an error on the host
                                 // (error kinds), or served correctly (delay, reorder)
  std::uint64_t hangs = 0;       // reads that took longer than the bound (wall clock)
  std::uint64_t mismatches = 0;  // values neither right nor the failure value 0
  std::uint64_t failed_reads = 0;
  std::uint64_t reads = 0;
  std::uint64_t errors_recorded = 0;  // io_error::count()
  bool error_named = false;      // the exception named index, LBA and status
  bool reopened = false;         // closed, reopened healthy, read right
  double seconds = 0;
  std::string message;           // what the host raised
};

fault_outcome run_fault(fault_kind kind, const fault_setup& s, const reader& read);

// One hostile input and what became of it.
struct hostile_case {
  std::string name;
  bool refused_cleanly = false;  // the expected error, precise, and nothing else went wrong
  bool skipped = false;          // not applicable here (e.g. permissions as root)
  std::string message;
};

// The hostile inputs of the host API and of the device index checks, over
// files in `dir`; `gpu` adds the cases only a GPU has (cache larger than
// free GPU memory). Permission cases run in a child that drops root to
// uid 65534 where needed (skipped, never passed, where that fails).
std::vector<hostile_case> run_hostile(const std::string& dir, const reader& read,
                                      const writer& write, bool gpu);

// Cases tried elsewhere (scripts/python_hostile.py: dtype and shape from
// Python), one per line: "refused<TAB>name<TAB>message", "NOT<TAB>..." or
// "skipped<TAB>...". A missing file gives one skipped case.
std::vector<hostile_case> read_hostile_cases(const std::string& path, const std::string& what);

// Results entries in the RESULTS.md format.
bench::result fault_result(const fault_outcome& o, const std::string& target);
bench::result hostile_result(const std::vector<hostile_case>& cases, const std::string& target);

// Host-controller options of the scenarios: buffered I/O, 4 KiB lines in
// sets of 4, queue depth 32 (at least a GPU warp).
options scenario_options(std::size_t cache_bytes, std::uint32_t queue_pairs,
                         std::uint32_t service_threads, std::uint64_t timeout_ns);

// `reads` random indices below `count`.
std::vector<std::uint64_t> random_indices(std::uint64_t count, std::uint64_t reads,
                                          std::uint64_t seed);

}  // namespace warpstore::reliability

namespace warpstore::reliability {

// What a target brings to the study: how it reads, and the parts only it runs.
struct target {
  std::string name;   // "cpu" | "gpu"
  std::string device; // for the results header
  reader read;
  writer write;
  bool gpu = false;
  // Extra entries (the read/write soak; the GPU's read soak and
  // cache-pressure runs), given the args.
  std::function<std::vector<bench::result>(const bench::parsed_args&)> extra;
  // Declares the options `extra` reads.
  std::function<void(bench::command_spec&)> extra_options;
};

// The whole study for one target: fault kinds, hostile inputs, the figures
// of the protocol checks run beside it (model states, seeds, sanitizer
// runs, passed in by the script); prints a table, merges the results into
// --json. Returns 0 when everything was detected, nothing hung and no wrong
// byte came back.
int run_study(int argc, char** argv, const target& t);

// The main() of a target's program: run_study over the target `make`
// builds; an error (making the target included) is printed after
// `program`'s name and exits 3.
int study_main(int argc, char** argv, const char* program, const std::function<target()>& make);

}  // namespace warpstore::reliability
