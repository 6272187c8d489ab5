// warpstore-bench: the benchmark driver. Each subcommand measures one thing
// and its ceiling in the same run, verifies every byte it moved, prints a
// table and merges its entries into bench/results/<study>.json.
//
//   warpstore-bench block    --controller host --threads 1M --request 4K
//   warpstore-bench ceilings --cpu-threads 1,4,8,14
//   warpstore-bench COMMAND --help
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>

#include "bench/subcommands.h"
#include "support/results.h"
#include "warpstore/runtime.h"

#ifndef WARPSTORE_SOURCE_DIR
#define WARPSTORE_SOURCE_DIR "."
#endif

namespace warpstore::bench {
namespace {

// Every subcommand; add a row to add one (see subcommands.h).
const subcommand subcommands[] = {
    {"block", "raw queue I/O with no cache, like fio run by GPU threads", declare_block, run_block},
    {"ceilings", "only the ceilings: io_uring reads, pinned-memory copy kernel, GPU-memory reads",
     declare_ceilings, run_ceilings},
    {"array", "element reads through the cache: cold (misses) or hot (coalesced hits)", declare_array,
     run_array},
    {"iomethods", "I/O-methods comparison: io_uring, pread, mmap, unified memory, cuFile, warpstore",
     declare_iomethods, run_iomethods},
    {"writes", "write-heavy vector add through the cache vs a tiled pread/copy/pwrite loop",
     declare_writes, run_writes},
    {"checkpoint", "checkpoints of GPU buffers through warpstore vs cudaMemcpy + pwrite + fdatasync",
     declare_checkpoint, run_checkpoint},
    {"log", "write-ahead log appends: lock-free per-warp regions vs one global lock", declare_log,
     run_log},
    {"nvme", "GPU threads driving the software NVMe model: reads vs its capacity, doorbells, faults",
     declare_nvme, run_nvme},
};

constexpr int exit_ok = 0, exit_error = 1, exit_usage = 2, exit_mismatch = 3;

int run(int argc, char** argv) {
  arg_parser parser("warpstore-bench",
                    "GPU-initiated storage benchmarks. Every figure comes with its ceiling measured\n"
                    "in the same run, and every byte moved is verified against the file pattern.");
  parser.common()
      .option("json", "PATH", WARPSTORE_SOURCE_DIR "/bench/results/core.json",
              "results file to merge into (RESULTS.md format)")
      .option("study", "NAME", "", "study name [default: the JSON file's stem]")
      .flag("fresh", "start the results file over instead of merging into it")
      .flag("no-json", "print the table only");
  for (const subcommand& s : subcommands) s.declare(parser.add_command(s.name, s.summary));

  parsed_args args;
  try {
    args = parser.parse(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "warpstore-bench: %s\n", e.what());
    return exit_usage;
  }
  if (args.wants_help()) {
    std::fputs(parser.help(args.command()).c_str(), stdout);
    return exit_ok;
  }

  const subcommand* cmd = nullptr;
  for (const subcommand& s : subcommands)
    if (args.command() == s.name) cmd = &s;
  report rep;
  try {
    cmd->run(args, rep);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "warpstore-bench %s: %s\n", cmd->name, e.what());
    return exit_usage;
  }

  std::cout << "\n" << results_table(rep.results);
  for (const auto& n : rep.notes) std::cout << n << "\n";

  if (!args.flag("no-json")) {
    const std::string path = args.str("json");
    const std::string study = args.str("study").empty() ? study_of(path) : args.str("study");
    if (args.flag("fresh")) std::filesystem::remove(path);
    write_results(path, run_info::now(study, runtime::device_name(), args.command_line()), rep.results);
    std::cout << "results merged into " << path << "\n";
  }

  std::uint64_t mismatches = 0;
  for (const auto& r : rep.results) mismatches += r.mismatches;
  if (mismatches != 0) {
    std::fprintf(stderr, "warpstore-bench %s: DATA MISMATCHES: %llu wrong words\n", cmd->name,
                 static_cast<unsigned long long>(mismatches));
    return exit_mismatch;
  }
  return exit_ok;
}

}  // namespace
}  // namespace warpstore::bench

int main(int argc, char** argv) {
  try {
    return warpstore::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warpstore-bench: error: %s\n", e.what());
    return warpstore::bench::exit_error;
  }
}
