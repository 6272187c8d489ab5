// warpstore-gen: writes (or checks) a dataset file whose every 8-byte word is
// tools::pattern_word(offset, seed), so any read of it can be verified.
//
//   warpstore-gen PATH SIZE [--seed N] [--threads T] [--no-sync]
//   warpstore-gen PATH [SIZE] --check [--seed N] [--threads T]
#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>

#include "support/args.h"
#include "support/pattern_file.h"
#include "support/progress.h"
#include "support/timing.h"

namespace {

namespace wb = warpstore::bench;

int run(const wb::parsed_args& args) {
  const std::string path = args.positional("PATH");
  const std::string size_text = args.positional("SIZE");
  const auto seed = static_cast<std::uint64_t>(args.integer("seed"));
  const unsigned threads = static_cast<unsigned>(std::max<std::uint64_t>(1, args.count("threads")));

  if (args.flag("check")) {
    wb::progress_bar bar("checking " + path);
    const auto r = warpstore::tools::check_pattern_file(
        path, seed, threads, [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); });
    bar.finish();
    const double secs = bar.seconds();
    std::printf("%s: %s, %llu mismatching words (seed %llu), read at %.2f GB/s\n", path.c_str(),
                wb::format_size(r.bytes).c_str(), static_cast<unsigned long long>(r.mismatches),
                static_cast<unsigned long long>(seed), wb::gb_per_s(static_cast<double>(r.bytes), secs));
    bool ok = r.mismatches == 0;
    if (r.mismatches != 0)
      std::printf("first mismatch at byte offset %llu\n",
                  static_cast<unsigned long long>(r.first_bad_offset));
    if (!size_text.empty() && wb::parse_size(size_text) != r.bytes) {
      std::printf("size is %llu bytes, expected %llu\n", static_cast<unsigned long long>(r.bytes),
                  static_cast<unsigned long long>(wb::parse_size(size_text)));
      ok = false;
    }
    return ok ? 0 : 1;
  }

  if (size_text.empty()) throw wb::usage_error("SIZE is needed to write a file (or pass --check)");
  const std::uint64_t size = wb::parse_size(size_text);
  wb::progress_bar bar("writing " + path);
  warpstore::tools::write_pattern_file(
      path, size, seed, threads, [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); },
      !args.flag("no-sync"));
  bar.finish();
  const double secs = bar.seconds();
  std::printf("%s: wrote %s (seed %llu) in %.2f s, %.2f GB/s with %u threads%s\n", path.c_str(),
              wb::format_size(size).c_str(), static_cast<unsigned long long>(seed), secs,
              wb::gb_per_s(static_cast<double>(size), secs), threads,
              args.flag("no-sync") ? " (not synced)" : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  wb::arg_parser parser("warpstore-gen",
                        "Writes a file of SIZE bytes whose every 8-byte word (little-endian) is\n"
                        "tools::pattern_word(offset, seed), or with --check verifies one.\n"
                        "Sizes take binary suffixes: 4096, 64M, 16GiB.");
  const unsigned hw = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  parser.common()
      .positional("PATH", "file to write or check")
      .positional("SIZE", "bytes to write (with --check: the size the file must have)", false)
      .option("seed", "N", "0", "pattern seed")
      .option("threads", "T", std::to_string(hw), "parallel pwrite/pread streams")
      .flag("check", "verify an existing file instead of writing")
      .flag("no-sync", "skip the fdatasync at the end of writing");
  try {
    const wb::parsed_args args = parser.parse(argc, argv);
    if (args.wants_help()) {
      std::fputs(parser.help().c_str(), stdout);
      return 0;
    }
    return run(args);
  } catch (const wb::usage_error& e) {
    std::fprintf(stderr, "warpstore-gen: %s\nwarpstore-gen --help shows the usage.\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nwarpstore-gen: %s\n", e.what());
    return 1;
  }
}
