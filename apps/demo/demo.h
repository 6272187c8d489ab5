// The README demo, shared by its GPU and CPU builds: make a multi-GB file
// whose content is a function of the offset, gather random elements through a
// cache a fraction of its size, verify every one, print what happened.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "support/args.h"
#include "support/pattern_file.h"
#include "warpstore/array.cuh"
#include "warpstore/launch.cuh"
#include "warpstore/runtime.h"

namespace demo {

struct config {
  std::string path;
  std::uint64_t file_bytes;
  std::uint64_t cache_bytes;
  std::uint64_t reads;
  warpstore::options opts;
};

inline config parse(int argc, char** argv, std::uint64_t default_size, std::uint64_t default_reads) {
  using namespace warpstore;
  bench::arg_parser p("warpstore-demo",
                      "Gather random 8-byte elements of a big file through a small cache, verified");
  p.common()
      .option("file", "PATH", "/tmp/warpstore-demo.bin", "data file (created if missing or of another size)")
      .option("size", "BYTES", std::to_string(default_size), "file size")
      .option("cache-fraction", "N", "8", "cache is 1/N of the file")
      .option("reads", "COUNT", std::to_string(default_reads), "random elements to read")
      .option("controller", "NAME", "host", "host (io_uring threads) or memory (pinned host copy)")
      .option("service-threads", "N", "0", "host controller threads (0: one per core, at most 8)")
      .option("direct", "off|auto|on", "off",
              "O_DIRECT for the host controller (the new file is in the page cache)");
  const bench::parsed_args a = p.parse(argc, argv);
  if (a.wants_help()) {
    std::fputs(p.help().c_str(), stdout);
    std::exit(0);
  }
  config c;
  c.path = a.str("file");
  c.file_bytes = a.size("size") / 4096 * 4096;
  c.cache_bytes = c.file_bytes / a.count("cache-fraction");
  c.reads = a.count("reads");
  c.opts = options::from_environment();
  c.opts.controller = parse_controller(a.choice("controller", {"host", "memory"}));
  c.opts.service_threads = static_cast<std::uint32_t>(a.count("service-threads"));
  if (c.opts.service_threads == 0)
    c.opts.service_threads = std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  c.opts.cache_bytes = c.cache_bytes;
  c.opts.direct = parse_direct(a.str("direct"));
  return c;
}

// Creates the file unless one of the right size is there already.
inline void ensure_file(const config& c) {
  struct stat st {};
  if (::stat(c.path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) == c.file_bytes) return;
  std::fprintf(stderr, "creating %s (%.1f GiB)\n", c.path.c_str(), c.file_bytes / double(1ull << 30));
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  warpstore::tools::write_pattern_file(c.path, c.file_bytes, 0, threads,
                                       [](std::uint64_t done, std::uint64_t total) {
                                         std::fprintf(stderr, "\r  %3.0f%%", 100.0 * done / total);
                                         if (done == total) std::fputc('\n', stderr);
                                       });
}

// The gather: lane k of the launch reads random elements k, k + lanes, ...
// of the `reads`, verifies each and adds the wrong ones to *wrong.
struct gather_body {
  warpstore::array_ref<std::uint64_t> a;
  std::uint64_t reads;
  unsigned long long* wrong;  // device memory

  WARPSTORE_HD void operator()(std::uint64_t w, std::uint64_t n) const {
    namespace warp = warpstore::detail::warp;
    unsigned long long bad = 0;
    for (std::uint64_t k = w * warp::size + warp::lane(); k < reads; k += n * warp::size) {
      const std::uint64_t i = warpstore::tools::pattern_word(k * 8, 12345) % a.size();
      bad += a[i] != warpstore::tools::pattern_word(i * 8);
    }
    if (bad)
      warpstore::detail::device_atomic<unsigned long long>(*wrong).fetch_add(
          bad, warpstore::detail::memory_order_relaxed);
  }
};

// Gathers on `warps` warps (run_warps), then checks the array; the seconds
// the gather took and the wrong elements.
inline std::pair<double, std::uint64_t> gather(const warpstore::array<std::uint64_t>& a,
                                               const config& c, std::uint64_t warps) {
  auto wrong = warpstore::runtime::make_device<unsigned long long>(1);
  const auto t0 = std::chrono::steady_clock::now();
  warpstore::run_warps(warps, gather_body{a.ref(), c.reads, wrong.get()});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned long long bad = 0;
  warpstore::runtime::copy_to_host(&bad, wrong.get(), sizeof bad);
  a.check();
  return {s, bad};
}

inline int report(const config& c, const char* device, const char* controller, double seconds,
                  std::uint64_t wrong, const warpstore::cache_stats& s) {
  std::printf("device       %s\n", device);
  std::printf("controller   %s\n", controller);
  std::printf("file         %s, %.2f GiB\n", c.path.c_str(), c.file_bytes / double(1ull << 30));
  std::printf("cache        %.2f GiB (1/%llu of the file), %u-byte lines\n",
              c.cache_bytes / double(1ull << 30),
              static_cast<unsigned long long>(c.file_bytes / c.cache_bytes), c.opts.line_size);
  std::printf("reads        %llu random 8-byte elements in %.3f s: %.2f M reads/s\n",
              static_cast<unsigned long long>(c.reads), seconds, c.reads / seconds / 1e6);
  std::printf("from storage %.2f GB/s (%llu lines)\n", s.bytes_read / seconds / 1e9,
              static_cast<unsigned long long>(s.misses));
  std::printf("hit rate     %.1f %% of %llu lookups\n", 100.0 * s.hit_rate(),
              static_cast<unsigned long long>(s.hits + s.misses));
  std::printf("verified     %llu reads, %llu wrong\n", static_cast<unsigned long long>(c.reads),
              static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 1;
}

}  // namespace demo
