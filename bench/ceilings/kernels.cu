#include "bench/ceilings/kernels.cuh"

#include <algorithm>
#include <cmath>

#include "support/timing.h"

namespace warpstore::bench {

namespace {

constexpr unsigned full_mask = 0xFFFFFFFFu;

// Mismatch counter in device memory, read back after the kernels.
class device_counter {
 public:
  device_counter() : p_(runtime::make_device<unsigned long long>(1)) {}
  unsigned long long* get() const { return p_.get(); }
  std::uint64_t read() const {
    unsigned long long v = 0;
    runtime::copy_to_host(&v, p_.get(), sizeof v);
    return v;
  }
  void reset() const { runtime::memset_device(p_.get(), 0, sizeof(unsigned long long)); }

 private:
  runtime::device_ptr<unsigned long long> p_;
};

}  // namespace

std::uint64_t verify_trace(const std::byte* buf, std::uint32_t line_bytes, const trace& tr,
                           std::uint64_t first, std::uint64_t count, std::uint64_t seed) {
  device_counter bad;
  launch_verify_lines(buf, line_bytes, count, trace_offsets{tr, first, line_bytes}, seed, bad.get());
  check_launch("verify_lines_kernel (trace)");
  return bad.read();
}

std::uint64_t verify_offsets(const std::byte* buf, std::uint32_t line_bytes,
                             const std::uint64_t* offsets, std::uint64_t count, std::uint64_t seed) {
  device_counter bad;
  launch_verify_lines(buf, line_bytes, count, listed_offsets{offsets}, seed, bad.get());
  check_launch("verify_lines_kernel (offsets)");
  return bad.read();
}

// ---- pinned_random_copy ---------------------------------------------------------

namespace {

constexpr int copy_unroll = 8;  // 16-byte loads in flight per lane: 4 KiB per warp
constexpr int copy_block_threads = 256;

// Each warp copies batches of `lines_per_batch` lines (block tr.index(first
// + line) of the source, line_bytes each) to dst[line]. A batch is one flat
// run of 16-byte words, so a warp keeps copy_unroll loads per lane in flight
// across line boundaries; lane l looks up the block of line l of the batch.
__global__ void random_copy_kernel(const uint4* __restrict__ src, trace tr, std::uint64_t first,
                                   std::uint64_t count, std::uint32_t words_per_line,
                                   std::uint32_t lines_per_batch, uint4* __restrict__ dst) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warp =
      (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::uint64_t warps = (static_cast<std::uint64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::uint64_t base = warp * lines_per_batch; base < count; base += warps * lines_per_batch) {
    const std::uint32_t lines =
        count - base < lines_per_batch ? static_cast<std::uint32_t>(count - base) : lines_per_batch;
    const std::uint64_t my_block = lane < lines ? tr.index(first + base + lane) : 0;
    const std::uint32_t total = lines * words_per_line;
    for (std::uint32_t j0 = 0; j0 < total; j0 += 32 * copy_unroll) {
      uint4 v[copy_unroll];
#pragma unroll
      for (int u = 0; u < copy_unroll; ++u) {
        const std::uint32_t j = j0 + u * 32 + lane;
        const std::uint32_t line = j / words_per_line;
        // Every lane takes part in the shuffle; lanes past the batch end read nothing.
        const std::uint64_t block = __shfl_sync(full_mask, my_block, static_cast<int>(line & 31u));
        if (j < total) v[u] = __ldg(src + block * words_per_line + (j - line * words_per_line));
      }
#pragma unroll
      for (int u = 0; u < copy_unroll; ++u) {
        const std::uint32_t j = j0 + u * 32 + lane;
        if (j < total) dst[base * words_per_line + j] = v[u];
      }
    }
  }
}

}  // namespace

copy_result pinned_random_copy(const copy_config& cfg) {
  if (cfg.source == nullptr) throw runtime_error("pinned_random_copy: no source");
  if (cfg.line_bytes == 0 || cfg.line_bytes % 16 != 0)
    throw runtime_error("pinned_random_copy: line size must be a positive multiple of 16");
  if (reinterpret_cast<std::uintptr_t>(cfg.source) % 16 != 0)
    throw runtime_error("pinned_random_copy: source not 16-byte aligned");
  if (cfg.tr.blocks > cfg.source_bytes / cfg.line_bytes)
    throw runtime_error("pinned_random_copy: the trace spans more lines than the source holds");
  copy_result res;
  res.lines = cfg.lines;
  res.bytes = cfg.lines * cfg.line_bytes;
  if (cfg.lines == 0) return res;

  const std::uint64_t per_round =
      std::min<std::uint64_t>(cfg.lines, std::max<std::uint64_t>(1, cfg.dst_bytes / cfg.line_bytes));
  auto dst = runtime::make_device<std::byte>(per_round * cfg.line_bytes, false);
  const std::uint32_t words_per_line = cfg.line_bytes / 16;
  const auto lines_per_batch = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>((32u * 16u * copy_unroll) / cfg.line_bytes, 1, 32));
  res.lines_per_warp = lines_per_batch;
  const unsigned max_blocks = resident_blocks(random_copy_kernel, copy_block_threads);
  const auto src = reinterpret_cast<const uint4*>(cfg.source);
  auto launch = [&](std::uint64_t first, std::uint64_t count) {
    const std::uint64_t warps_needed = (count + lines_per_batch - 1) / lines_per_batch;
    const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>(
        max_blocks, (warps_needed + copy_block_threads / 32 - 1) / (copy_block_threads / 32)));
    random_copy_kernel<<<blocks, copy_block_threads>>>(src, cfg.tr, first, count, words_per_line,
                                                       lines_per_batch,
                                                       reinterpret_cast<uint4*>(dst.get()));
    check_launched("random_copy_kernel");
  };

  // Warm-up: the first round once, untimed (page-table and TLB setup of the
  // pinned mapping, clocks).
  launch(0, per_round);
  check_launch("random_copy_kernel (warm-up)");

  device_counter bad;
  gpu_timer timer;
  for (std::uint64_t first = 0; first < cfg.lines; first += per_round) {
    const std::uint64_t count = std::min(per_round, cfg.lines - first);
    runtime::memset_device(dst.get(), 0xFF, count * cfg.line_bytes);  // no stale line passes
    timer.start();
    launch(first, count);
    timer.stop();
    check_launch("random_copy_kernel");
    res.seconds += timer.seconds();
    ++res.rounds;
    if (cfg.verify) {
      launch_verify_lines(dst.get(), cfg.line_bytes, count, trace_offsets{cfg.tr, first, cfg.line_bytes},
                          cfg.file_seed, bad.get());
      check_launch("verify_lines_kernel (pinned_random_copy)");
    }
  }
  res.mismatches = bad.read();
  res.verified = cfg.verify;
  res.gbps = gb_per_s(static_cast<double>(res.bytes), res.seconds);
  res.lines_per_s = res.seconds > 0 ? static_cast<double>(res.lines) / res.seconds : 0;
  return res;
}

// ---- hbm_read -------------------------------------------------------------------

namespace {

constexpr int hbm_block_threads = 512;

__device__ inline std::uint64_t fold(std::uint32_t v) { return v; }
__device__ inline std::uint64_t fold(uint4 v) {
  return ((static_cast<std::uint64_t>(v.y) << 32) | v.x) ^ ((static_cast<std::uint64_t>(v.w) << 32) | v.z);
}

__device__ inline void xor_into(unsigned long long* out, std::uint64_t acc) {
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_down_sync(full_mask, acc, o);
  if ((threadIdx.x & 31u) == 0) atomicXor(out, static_cast<unsigned long long>(acc));
}

// XOR of every element, four independent loads in flight per thread.
template <class V>
__global__ void hbm_read_kernel(const V* __restrict__ p, std::uint64_t n, unsigned long long* out) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::uint64_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const V a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= fold(a) ^ fold(b) ^ fold(c) ^ fold(d);
  }
  for (; i < n; i += stride) acc ^= fold(p[i]);
  xor_into(out, acc);
}

__global__ void pattern_fill_kernel(std::uint64_t* p, std::uint64_t words, std::uint64_t seed) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride)
    p[i] = tools::pattern_word(8 * i, seed);
}

// XOR of the pattern words themselves: the checksum a correct read must give.
__global__ void pattern_xor_kernel(std::uint64_t words, std::uint64_t seed, unsigned long long* out) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  std::uint64_t acc = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride)
    acc ^= tools::pattern_word(8 * i, seed);
  xor_into(out, acc);
}

}  // namespace

hbm_result hbm_read(std::uint64_t bytes, int repeats, std::uint64_t seed) {
  hbm_result res;
  repeats = std::max(1, repeats);
  res.repeats = repeats;
  bytes = std::min<std::uint64_t>(bytes, runtime::free_device_memory() / 10 * 8);
  bytes &= ~std::uint64_t{4095};  // whole 4 KiB lines for the verify pass
  if (bytes == 0) throw runtime_error("hbm_read: no GPU memory to read");
  res.bytes = bytes;
  auto buf = runtime::make_device<std::uint64_t>(bytes / 8, false);
  const std::uint64_t words = bytes / 8;

  const unsigned fill_blocks = resident_blocks(pattern_fill_kernel, hbm_block_threads);
  pattern_fill_kernel<<<fill_blocks, hbm_block_threads>>>(buf.get(), words, seed);
  check_launch("pattern_fill_kernel");
  device_counter expected;
  pattern_xor_kernel<<<resident_blocks(pattern_xor_kernel, hbm_block_threads), hbm_block_threads>>>(
      words, seed, expected.get());
  check_launch("pattern_xor_kernel");
  const std::uint64_t want64 = expected.read();
  const std::uint64_t want32 = (want64 & 0xFFFFFFFFu) ^ (want64 >> 32);

  device_counter got;
  gpu_timer timer;
  auto run = [&](auto kernel, const auto* p, std::uint64_t n, std::uint64_t want, const char* name) {
    const unsigned blocks = resident_blocks(kernel, hbm_block_threads);
    double best = 0;
    for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up
      got.reset();
      timer.start();
      kernel<<<blocks, hbm_block_threads>>>(p, n, got.get());
      timer.stop();
      check_launch(name);
      const double secs = timer.seconds();
      if (got.read() != want) ++res.mismatches;
      if (r >= 0) best = std::max(best, gb_per_s(static_cast<double>(bytes), secs));
    }
    return best;
  };
  res.gbps_4b = run(hbm_read_kernel<std::uint32_t>, reinterpret_cast<const std::uint32_t*>(buf.get()),
                    bytes / 4, want32, "hbm_read_kernel<uint32>");
  res.gbps_16b = run(hbm_read_kernel<uint4>, reinterpret_cast<const uint4*>(buf.get()), bytes / 16,
                     want64, "hbm_read_kernel<uint4>");

  device_counter bad;
  launch_verify_lines(reinterpret_cast<const std::byte*>(buf.get()), 4096, bytes / 4096,
                      linear_offsets{0, 4096}, seed, bad.get());
  check_launch("verify_lines_kernel (hbm_read)");
  res.mismatches += bad.read();
  res.verified = true;
  return res;
}

}  // namespace warpstore::bench
