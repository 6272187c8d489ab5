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

#include "bench/common/args.h"
#include "bench/common/results.h"
#include "bench/common/trace.h"
#include "warpstore/runtime.h"

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

// 512 -> "512", 4096 -> "4k", 65536 -> "64k", 1 MiB -> "1m": for result names.
std::string size_tag(std::uint64_t bytes);

// Allocator hooks that give the io_uring ceiling pinned memory.
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p);

}  // namespace warpstore::bench
