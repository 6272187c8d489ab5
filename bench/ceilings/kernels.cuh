// GPU ceilings and the verify kernel every GPU benchmark uses.
//
//   verify       count the 8-byte words of a device buffer of lines that
//                differ from the file pattern (support/pattern.cuh)
//   pinned_random_copy
//                ceiling of the memory controller: a kernel copying the same
//                lines (same trace) from a pinned host copy of the file into
//                device memory, one warp per line, 16-byte loads, 4 KiB in
//                flight per warp (several lines when lines are smaller)
//   hbm_read     plain GPU-memory read bandwidth, 4- and 16-byte coalesced loads
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "support/gpu.cuh"
#include "support/pattern.cuh"
#include "support/trace.h"

namespace warpstore::bench {

// ---- verify -------------------------------------------------------------------

// Where line k of a buffer comes from in the file.
struct trace_offsets {  // request first + k of a trace, blocks of line_bytes
  trace tr;
  std::uint64_t first;
  std::uint32_t line_bytes;
  WARPSTORE_HD std::uint64_t operator()(std::uint64_t k) const {
    return tr.index(first + k) * line_bytes;
  }
};
struct listed_offsets {  // offsets[k], bytes (device memory)
  const std::uint64_t* offsets;
  WARPSTORE_HD std::uint64_t operator()(std::uint64_t k) const { return offsets[k]; }
};
struct linear_offsets {  // the buffer is the file from `base` on
  std::uint64_t base;
  std::uint32_t line_bytes;
  WARPSTORE_HD std::uint64_t operator()(std::uint64_t k) const { return base + k * line_bytes; }
};

inline constexpr int verify_block_threads = 256;

// One warp per line: adds to *counter the words of line k (at buf + k *
// line_bytes) that differ from the pattern at offset_of(k). line_bytes and
// every offset are multiples of 8; blockDim.x a multiple of 32.
template <class OffsetOf>
__global__ void verify_lines_kernel(const std::byte* __restrict__ buf, std::uint32_t line_bytes,
                                    std::uint64_t count, OffsetOf offset_of, std::uint64_t seed,
                                    unsigned long long* counter) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warp =
      (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::uint64_t warps = (static_cast<std::uint64_t>(gridDim.x) * blockDim.x) >> 5;
  const std::uint32_t words = line_bytes / 8;
  unsigned long long bad = 0;
  for (std::uint64_t line = warp; line < count; line += warps) {
    const std::uint64_t file_offset = offset_of(line);
    const auto* w = reinterpret_cast<const std::uint64_t*>(buf + line * line_bytes);
    for (std::uint32_t k = lane; k < words; k += 32)
      bad += w[k] != tools::pattern_word(file_offset + 8ull * k, seed) ? 1 : 0;
  }
  bad = warpstore::detail::warp::sum(0xFFFFFFFFu, bad);
  if (lane == 0 && bad != 0) atomicAdd(counter, bad);
}

// Launches verify_lines_kernel on `stream` (checked, not waited for).
template <class OffsetOf>
void launch_verify_lines(const std::byte* buf, std::uint32_t line_bytes, std::uint64_t count,
                         OffsetOf offset_of, std::uint64_t seed, unsigned long long* counter,
                         cudaStream_t stream = nullptr) {
  if (line_bytes == 0 || line_bytes % 8 != 0)
    throw runtime_error("verify: line size must be a positive multiple of 8");
  if (count == 0) return;
  const unsigned max_blocks = resident_blocks(verify_lines_kernel<OffsetOf>, verify_block_threads);
  const std::uint64_t needed = (count + verify_block_threads / 32 - 1) / (verify_block_threads / 32);
  const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>(max_blocks, needed));
  verify_lines_kernel<OffsetOf>
      <<<blocks, verify_block_threads, 0, stream>>>(buf, line_bytes, count, offset_of, seed, counter);
  check_launched("verify_lines_kernel");
}

// Synchronous forms: the number of mismatching words.
std::uint64_t verify_trace(const std::byte* buf, std::uint32_t line_bytes, const trace& tr,
                           std::uint64_t first, std::uint64_t count, std::uint64_t seed);
std::uint64_t verify_offsets(const std::byte* buf, std::uint32_t line_bytes,
                             const std::uint64_t* offsets, std::uint64_t count, std::uint64_t seed);

// ---- pinned_random_copy ---------------------------------------------------------

struct copy_config {
  const std::byte* source = nullptr;  // pinned host copy of the file, device-addressable
  std::uint64_t source_bytes = 0;
  trace tr;                    // block (of line_bytes) of line i; device-readable indices
  std::uint64_t lines = 0;     // lines to copy (trace requests 0 .. lines-1)
  std::uint32_t line_bytes = 4096;  // multiple of 16
  std::uint64_t file_seed = 0;
  std::uint64_t dst_bytes = std::uint64_t{4} << 30;  // device buffer; more lines go in rounds
  bool verify = true;
};

struct copy_result {
  double seconds = 0;  // timed rounds
  std::uint64_t lines = 0;
  std::uint64_t bytes = 0;
  double gbps = 0;
  double lines_per_s = 0;
  std::uint64_t mismatches = 0;
  bool verified = false;
  unsigned rounds = 0;
  unsigned lines_per_warp = 0;  // lines one warp keeps in flight
};

copy_result pinned_random_copy(const copy_config& cfg);

// ---- hbm_read -------------------------------------------------------------------

struct hbm_result {
  std::uint64_t bytes = 0;
  int repeats = 0;
  double gbps_4b = 0;   // best of the repeats, 4-byte loads
  double gbps_16b = 0;  // best of the repeats, 16-byte loads
  std::uint64_t mismatches = 0;  // wrong words in the buffer plus reads whose checksum was wrong
  bool verified = false;
};

// Reads `bytes` (capped at 80 % of free GPU memory) of a pattern-filled
// device buffer `repeats` times per load width after a warm-up; each read's
// XOR checksum is compared with the pattern's.
hbm_result hbm_read(std::uint64_t bytes, int repeats, std::uint64_t seed);

}  // namespace warpstore::bench
