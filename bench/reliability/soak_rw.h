// The mixed read/write soak's host driver (soak.readwrite), shared by the
// CPU and GPU studies; soak_rw.cuh holds what the writers do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/reliability/soak_rw.cuh"
#include "support/args.h"
#include "support/results.h"

namespace warpstore::reliability {

// How a target runs the writers.
struct rw_launcher {
  std::uint32_t lanes = 1;  // lanes per writer (the target's warp size)
  // Runs rw_writer(r, w) for every writer w < r.writers and returns when all
  // are done. A writer that does not finish in bound_s is a hang: report it
  // and end the process (nothing after it could be trusted).
  std::function<void(const rw_round& r, double bound_s)> round;
  // One warp calls a.flush() (the device flush); returns its result.
  std::function<bool(const array_ref<std::uint64_t>& a, double bound_s)> device_flush;
};

// One run of the soak: a controller and a line size, with chunks of
// `chunk_bytes` (below the line size several writers share a line; at or
// above it whole lines are written by one span).
struct rw_part {
  controller_kind kind;
  std::uint32_t line_size;
  std::uint32_t chunk_bytes;
};

struct rw_setup {
  std::string path;  // a tools::pattern_file of file_bytes, rewritten by the soak
  std::uint64_t file_bytes = 0;
  std::size_t cache_bytes = 0;  // under 1/32 of the file
  std::uint32_t ways = 4;
  std::uint64_t writers = 8;
  std::uint32_t ops = 1000;       // ops per writer per round
  std::uint32_t rounds = 8;       // rounds per part
  std::uint32_t span_max = 8192;  // longest span, elements
  std::uint32_t service_threads = 2;
  std::uint64_t timeout_ns = 10'000'000'000ull;
  std::uint64_t seed = 1;
  std::string target;  // "cpu" | "gpu": the entry is soak.readwrite[.gpu]
};

// The default parts: both controllers, 4 KiB and 64 KiB lines, chunks
// smaller and larger than a line.
std::vector<rw_part> default_rw_parts();

// Runs every part over one file (the model carries from part to part: each
// part reopens what the last one wrote), flushing on the host and from the
// device between and within rounds; after each part compares the whole file
// on disk with the host's model byte for byte. One results entry.
bench::result run_soak_readwrite(const rw_setup& s, const std::vector<rw_part>& parts,
                                 const rw_launcher& launch);

// Declares the --rw-* options (defaults per target) and reads them back.
void declare_rw_options(bench::command_spec& c, const std::string& file, const std::string& cache,
                        const std::string& writers, const std::string& ops,
                        const std::string& rounds);
rw_setup rw_setup_from(const bench::parsed_args& args, const std::string& target);

}  // namespace warpstore::reliability
