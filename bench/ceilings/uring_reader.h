// Ceiling for the host controller: what raw io_uring does on this machine
// with the same file, trace, block size, thread count and queue depth.
//
// T threads, each with its own ring kept QD deep, read `requests` blocks of
// `block_bytes` (block trace.index(i) for request i) into one destination
// slot per request, in pinned memory when the caller supplies an allocator
// (the GPU benchmark passes runtime::alloc_host_mapped), with registered
// buffers and READ_FIXED. When the slots for all requests would exceed
// `arena_bytes` the run goes in rounds; after each timed round every block
// is verified against the pattern with the clock stopped, so every byte read
// is checked and the check costs no measured time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/trace.h"

namespace warpstore::bench {

enum class direct_mode { off, automatic, on };
// "off" | "auto" | "on"; raises usage_error otherwise.
direct_mode parse_direct_mode(const std::string& s);
const char* to_string(direct_mode m);

struct uring_reader_config {
  std::string path;
  unsigned threads = 1;
  unsigned queue_depth = 64;        // reads in flight per ring
  std::uint32_t block_bytes = 4096;  // multiple of 512
  std::uint64_t requests = 1 << 20;  // in total, over all threads
  bench::trace trace = trace::uniform(1, 1);  // block index of request i (host-readable)
  direct_mode direct = direct_mode::off;
  bool fixed_buffers = true;  // register the arena and use READ_FIXED (falls back if refused)
  bool verify = true;
  bool record_latency = false;  // per-request latency, submission to completion (clock_gettime)
  std::uint64_t file_seed = 0;  // pattern seed of the file
  std::uint64_t arena_bytes = std::uint64_t{1} << 30;
  // Destination memory; default: page-aligned host memory.
  std::function<void*(std::size_t)> alloc;
  std::function<void(void*)> release;
};

struct uring_reader_result {
  double seconds = 0;  // timed rounds only
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
  double iops = 0;
  double gbps = 0;
  std::uint64_t mismatches = 0;  // 8-byte words that differ from the pattern
  std::uint64_t errors = 0;      // failed or short reads
  std::string first_error;
  bool verified = false;
  bool direct = false;         // O_DIRECT was used
  bool fixed_buffers = false;  // READ_FIXED on registered buffers was used
  unsigned rounds = 0;
  double cpu_seconds = 0;         // process CPU time (getrusage) over the timed rounds
  std::vector<float> latency_us;  // with record_latency: one per request, in no order
};

// Runs the reader; raises std::runtime_error when it cannot set up (file,
// rings, O_DIRECT with direct_mode::on). Read errors are counted, not raised.
uring_reader_result run_uring_reader(const uring_reader_config& cfg);

}  // namespace warpstore::bench
