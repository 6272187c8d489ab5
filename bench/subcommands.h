// The subcommands of warpstore-bench and the pieces they share.
//
// Adding a subcommand (the `array` benchmark, for one):
//   1. write bench/<name>_bench.cu with
//        void declare_<name>(command_spec&);            // its options
//        void run_<name>(const parsed_args&, report&);  // measure, verify, fill the report
//   2. declare both below and add one row to the table in warpstore_bench.cu;
//   3. add the source to warpstore-bench in bench/CMakeLists.txt.
// main() does the rest: parsing, --help, the results table, merging the
// report into the study's JSON, exit status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/args.h"
#include "support/results.h"
#include "support/trace.h"
#include "warpstore/controller.h"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore::bench {

// What a subcommand hands back to main().
struct report {
  std::vector<result> results;
  std::vector<std::string> notes;  // printed under the results table
};

struct subcommand {
  const char* name;
  const char* summary;
  void (*declare)(command_spec&);
  void (*run)(const parsed_args&, report&);
};

// GPU fio: raw queue I/O through a controller, no cache (block_bench.cu).
void declare_block(command_spec& cmd);
void run_block(const parsed_args& args, report& out);
// The ceilings alone (ceilings_bench.cu).
void declare_ceilings(command_spec& cmd);
void run_ceilings(const parsed_args& args, report& out);
// Element reads through the cache, cold and hot (array_bench.cu).
void declare_array(command_spec& cmd);
void run_array(const parsed_args& args, report& out);
// The I/O-methods comparison, every way of getting file bytes to the GPU (iomethods_bench.cu).
void declare_iomethods(command_spec& cmd);
void run_iomethods(const parsed_args& args, report& out);
// Write-heavy vector add against a tiled pread/copy/pwrite loop (write_bench.cu).
void declare_writes(command_spec& cmd);
void run_writes(const parsed_args& args, report& out);
// Checkpoint groups against cudaMemcpy + pwrite + fdatasync (checkpoint_bench.cu).
void declare_checkpoint(command_spec& cmd);
void run_checkpoint(const parsed_args& args, report& out);
// Write-ahead log appends: per-warp lock-free regions vs one global lock (log_bench.cu).
void declare_log(command_spec& cmd);
void run_log(const parsed_args& args, report& out);
// GPU threads driving the software NVMe model: reads against the model's
// capacity, doorbells per command, injected faults (nvme_bench.cu).
void declare_nvme(command_spec& cmd);
void run_nvme(const parsed_args& args, report& out);

// ---- shared pieces (bench_setup.cu) ---------------------------------------------

// --file, --file-size, --file-seed, --no-warm
void declare_file_options(command_spec& cmd);
struct bench_file {
  std::string path;
  std::uint64_t bytes = 0;
  std::uint64_t seed = 0;  // pattern seed
};
// Generates the file if missing (or checks it), and with `warm` reads it once
// so buffered reads hit the page cache (unless --no-warm).
bench_file prepare_file(const parsed_args& args, bool warm);

// --pattern random|sequential|zipf, --zipf-exponent, --seed
void declare_trace_options(command_spec& cmd, const char* default_pattern = "random");

// The trace of a run over `blocks` blocks of a file for `requests` requests:
// uniform and sequential are counter-based; zipf indices are built on the
// host and copied to the device, and host() / device() read their own copy.
class bench_trace {
 public:
  bench_trace(const parsed_args& args, std::uint64_t blocks, std::uint64_t requests);
  const trace& host() const { return host_; }
  const trace& device() const { return device_; }
  const char* pattern() const { return access_name(host_.kind); }
  // pattern, seed and (zipf) exponent, for a result's params.
  void add_params(json::object& params) const;

 private:
  std::vector<std::uint64_t> host_indices_;
  runtime::device_ptr<std::uint64_t> device_indices_;
  trace host_;
  trace device_;
  double exponent_ = 0;
};

// --controller, --queues, --depth, --service-threads, --uring-depth, --direct,
// --delivery, defaulting to the WARPSTORE_* environment.
void declare_controller_options(command_spec& cmd);
// options::from_environment() with those applied.
options controller_options(const parsed_args& args);
// opts.validate(), what it refuses a usage error.
void validate_usage(const options& opts);
// --request: bytes per read, a multiple of 512 from 512 to 64K (a usage
// error otherwise).
std::uint64_t checked_request(const parsed_args& args);
// --block-threads: a multiple of 32 from 32 to 1024 (a usage error otherwise).
std::uint64_t checked_block_threads(const parsed_args& args);
// The controller's settings, for a result's params.
void add_controller_params(json::object& params, const options& opts, const controller& ctrl);

// A ceiling measured in the same run: a rate in GB/s and in requests (lines)
// per second, what it was, and its own params.
struct ceiling_figure {
  double gbps = 0;
  double per_s = 0;
  std::string name;
  json::object params;
};
// Raw io_uring with the host controller's service threads and ring depth,
// reading `requests` blocks of `bytes` of the same trace (with O_DIRECT when
// the controller used it). Raises if any read failed or read wrong data.
ceiling_figure uring_ceiling(const bench_file& file, const options& opts, bool direct,
                             const bench_trace& tr, std::uint64_t requests, std::uint32_t bytes);
// The pinned-memory copy kernel over the memory controller's copy of the
// file, same trace. Raises if it read wrong data.
ceiling_figure pinned_ceiling(const bench_file& file, const memory_source_ref& source,
                              const bench_trace& tr, std::uint64_t requests, std::uint32_t bytes,
                              std::uint64_t dst_bytes = std::uint64_t{4} << 30);

// 512 -> "512", 4096 -> "4k", 65536 -> "64k", 1 MiB -> "1m": for result names.
std::string size_tag(std::uint64_t bytes);

// Allocator hooks that give the io_uring ceiling pinned memory.
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p);

}  // namespace warpstore::bench
