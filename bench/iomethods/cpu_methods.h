// The CPU-driven methods of the I/O-methods comparison: CPU threads read the
// file and copy what they read to the GPU, as applications do today.
//
//   pread  each thread preads a batch of requests into pinned staging, then
//          copies the batch to the GPU asynchronously while it preads the
//          next batch into its other staging buffer (double-buffered)
//   mmap   the file is mapped; each thread copies every request straight
//          from the mapping to the GPU (one copy per request, pageable source)
//
// Where the bytes go is a `destination`: GPU memory in warpstore-bench,
// host memory in the CPU tests. Requests run in rounds of `slots` (the
// destination holds one slot per request of a round); after each round the
// clock stops and the destination is verified against the file pattern.
// Request i reads block tr.index(i) of request_bytes; thread t of a round
// takes a contiguous share of its requests. Latency of a request: from the
// start of its read to the end of the copy that carried it (clock_gettime).
// CPU seconds: getrusage of the whole process over the timed part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/iomethods/measure.h"
#include "support/trace.h"

namespace warpstore::bench::iomethods {

// What both directions share: two staging buffers per CPU thread, and
// waiting for the asynchronous copy started for one of them.
class staged_copier {
 public:
  virtual ~staged_copier() = default;
  // Staging buffer `buffer` (0 or 1) of CPU thread `thread`, staging_bytes() long.
  virtual std::byte* staging(unsigned thread, unsigned buffer) = 0;
  virtual std::size_t staging_bytes() const = 0;
  virtual void wait(unsigned thread, unsigned buffer) = 0;
};

class destination : public staged_copier {
 public:
  // Starts copying `bytes` from host memory `src` to byte `offset` of the
  // destination for `thread`'s buffer `buffer`; done once wait() returns.
  virtual void copy(unsigned thread, unsigned buffer, std::uint64_t offset, const std::byte* src,
                    std::size_t bytes) = 0;
  // 8-byte words of slots [0, count) that differ from the pattern, where slot
  // k holds request first + k of `tr` (request_bytes each); then overwrites
  // the slots, so a request the next round skips cannot pass with old bytes.
  virtual std::uint64_t verify(const trace& tr, std::uint64_t first, std::uint64_t count,
                               std::uint32_t request_bytes, std::uint64_t seed) = 0;
};

// Two staging buffers per thread in plain host memory (the CPU tests).
class host_staging {
 public:
  host_staging(unsigned threads, std::size_t staging_bytes);
  std::byte* get(unsigned thread, unsigned buffer);
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
  std::vector<std::vector<std::byte>> buffers_;
};

// A destination or source in host memory: copies are memcpy, done at once.
template <class Direction>
class host_staged : public Direction {
 public:
  host_staged(std::uint64_t bytes, unsigned threads, std::size_t staging_bytes)
      : data_(bytes), staging_(threads, staging_bytes) {}
  std::byte* staging(unsigned thread, unsigned buffer) override {
    return staging_.get(thread, buffer);
  }
  std::size_t staging_bytes() const override { return staging_.bytes(); }
  void wait(unsigned, unsigned) override {}
  std::byte* data() { return data_.data(); }

 protected:
  std::vector<std::byte> data_;
  host_staging staging_;
};

// Host memory as the destination (the CPU tests).
class host_destination final : public host_staged<destination> {
 public:
  host_destination(std::uint64_t bytes, unsigned threads, std::size_t staging_bytes);
  void copy(unsigned thread, unsigned buffer, std::uint64_t offset, const std::byte* src,
            std::size_t bytes) override;
  std::uint64_t verify(const trace& tr, std::uint64_t first, std::uint64_t count,
                       std::uint32_t request_bytes, std::uint64_t seed) override;
};

struct cpu_method_config {
  std::string path;
  unsigned threads = 8;
  std::uint32_t request_bytes = 4096;  // multiple of 8
  std::uint64_t requests = 0;
  trace tr = trace::uniform(1, 1);  // host-readable
  std::uint64_t file_seed = 0;
  std::uint64_t slots = 0;  // requests per round: the destination holds slots * request_bytes
};

struct method_result {
  double seconds = 0;  // timed rounds
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
  double gbps = 0;
  double iops = 0;
  std::uint64_t mismatches = 0;
  double cpu_seconds = 0;  // process CPU time over the timed rounds
  latency_summary latency;
  unsigned rounds = 0;
};

// What one CPU thread does with its share [first, last) of a round whose
// first request is round_base (slot k holds request round_base + k); it
// appends one latency in microseconds per request.
using thread_body =
    std::function<void(unsigned thread, std::uint64_t round_base, std::uint64_t first,
                       std::uint64_t last, std::vector<float>& latencies)>;

// What a method does around each round: `prepare` before its clock starts
// (may be empty), `verify` after it stops (returns wrong 8-byte words).
struct round_hooks {
  std::function<void(std::uint64_t first, std::uint64_t count)> prepare;
  std::function<std::uint64_t(std::uint64_t first, std::uint64_t count)> verify;
};

// The rounds every CPU-driven method runs (cuFile too): cfg.threads threads
// run `body` on their shares; the clock and the CPU meter run only while
// they do. The first exception a thread raises is raised here after all
// threads have finished.
method_result run_rounds(const cpu_method_config& cfg, const round_hooks& hooks,
                         const thread_body& body);
// Reads: each round verified in `dst`.
method_result run_rounds(const cpu_method_config& cfg, destination& dst, const thread_body& body);

// Both raise std::runtime_error / std::system_error naming the request on
// any failed or short read, and std::invalid_argument on a bad config.
method_result run_pread_method(const cpu_method_config& cfg, destination& dst);
method_result run_mmap_method(const cpu_method_config& cfg, destination& dst);

// ---- writes ------------------------------------------------------------------------
//
// Write methods write the pattern bytes of each request to its block of a
// write target: a file of the source file's size, made sparse (zeros) first,
// so a request that was never written reads back wrong. Writes are buffered
// (page cache), not made durable. After each round the written blocks are
// read back with pread and compared with the pattern, with the clock stopped.

// Where the bytes to write come from: GPU memory in warpstore-bench, host
// memory in the CPU tests. Slot k of a round holds request first + k.
class source : public staged_copier {
 public:
  // Starts copying `bytes` from byte `offset` of the source to host memory
  // `dst` for `thread`'s buffer `buffer`; done once wait() returns.
  virtual void fetch(unsigned thread, unsigned buffer, std::uint64_t offset, std::byte* dst,
                     std::size_t bytes) = 0;
  // Before a round (untimed): slot k := the pattern of request first + k.
  virtual void fill(const trace& tr, std::uint64_t first, std::uint64_t count,
                    std::uint32_t request_bytes, std::uint64_t seed) = 0;
};

// Host memory as the source (the CPU tests).
class host_source final : public host_staged<source> {
 public:
  using host_staged::host_staged;
  void fetch(unsigned thread, unsigned buffer, std::uint64_t offset, std::byte* dst,
             std::size_t bytes) override;
  void fill(const trace& tr, std::uint64_t first, std::uint64_t count, std::uint32_t request_bytes,
            std::uint64_t seed) override;
};

// Creates (or truncates) `path` as a sparse file of `bytes` zeros.
void make_write_target(const std::string& path, std::uint64_t bytes);
// Drops `path`'s contents (truncate to 0: dirty pages are discarded, not
// written back) and removes it.
void discard_write_target(const std::string& path);
// 8-byte words of the blocks of requests [first, first + count) of `tr` in
// the file at `path` that differ from the pattern, read back with `threads` threads.
std::uint64_t verify_written(const std::string& path, const trace& tr, std::uint64_t first,
                             std::uint64_t count, std::uint32_t request_bytes, std::uint64_t seed,
                             unsigned threads);

// The hooks of a write method: `src` filled before each round, the target
// (cfg.path) read back after it. cfg and src must outlive the hooks.
round_hooks write_hooks(const cpu_method_config& cfg, source& src);

// cfg.path is the write target. pwrite: each thread fetches a batch of
// requests into pinned staging while it pwrites the batch before
// (double-buffered). mmap: the target mapped shared; one fetch per request
// straight into the mapping. uring: the ceiling, io_uring writes (QD
// queue_depth per thread) from `arena`, host memory of cfg.slots requests
// filled with the pattern before each round.
method_result run_pwrite_method(const cpu_method_config& cfg, source& src);
method_result run_mmap_write_method(const cpu_method_config& cfg, source& src);
method_result run_uring_write_method(const cpu_method_config& cfg, unsigned queue_depth,
                                     std::byte* arena);

}  // namespace warpstore::bench::iomethods
