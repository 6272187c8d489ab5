// The read path on the GPU: 1 M+ threads verify every byte they read through
// a cache 1/16 of the data, for both controllers and several line sizes.
#include <gtest/gtest.h>

#include "test_files.h"
#include "write_cases.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"

using namespace warpstore;

namespace {

constexpr std::uint64_t file_bytes = 1ull << 30;

__device__ std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

// Grid-stride scan: together the threads read every element once.
__global__ void scan_kernel(array_ref<std::uint64_t> a, unsigned long long* wrong) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < a.size();
       i += stride)
    bad += a[i] != tools::pattern_word(i * 8);
  if (bad) atomicAdd(wrong, bad);
}

// Every thread reads `per_thread` random elements.
__global__ void random_kernel(array_ref<std::uint64_t> a, int per_thread, std::uint64_t seed,
                              unsigned long long* wrong) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  unsigned long long bad = 0;
  for (int k = 0; k < per_thread; ++k) {
    const std::uint64_t i = mix(t * 131 + k + seed * 0x9E3779B97F4A7C15ull) % a.size();
    bad += a[i] != tools::pattern_word(i * 8);
  }
  if (bad) atomicAdd(wrong, bad);
}

// Each warp copies a span with read_span and checks it; each lane also
// re-reads its own line through a pinned accessor.
__global__ void span_and_pin_kernel(array_ref<std::uint64_t> a, std::uint64_t* scratch,
                                    unsigned long long* wrong) {
  const std::uint64_t warp_id = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  constexpr std::uint64_t span = 1000;
  const std::uint64_t first = mix(warp_id) % (a.size() - span);
  std::uint64_t* out = scratch + warp_id * span;
  unsigned long long bad = a.read_span(first, span, out) ? 0 : 1;
  __syncwarp();
  for (std::uint64_t k = lane; k < span; k += 32) bad += out[k] != tools::pattern_word((first + k) * 8);
  pinned_line<std::uint64_t> p = a.pin(first + lane * 37);
  if (!p.valid()) ++bad;
  else
    for (std::uint64_t i = p.first; i < p.first + p.count; i += 7)
      bad += p[i] != tools::pattern_word(i * 8);
  p.release();
  if (bad) atomicAdd(wrong, bad);
}

// Lanes of one warp read two different arrays at the same call site: lane
// parity and the round pick the array, so every x[i] call has lanes of both
// arrays converged. The arrays have their own controllers and share a cache;
// each must still get its own bytes (regression: callers were once grouped
// by __activemask() alone, and fills mixed the two controllers' staging).
__global__ void two_arrays_kernel(array_ref<std::uint64_t> low, array_ref<std::uint64_t> high,
                                  std::uint64_t high_first, int rounds, unsigned long long* wrong) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  const array_ref<std::uint64_t> arrays[2] = {low, high};
  unsigned long long bad = 0;
  for (int r = 0; r < rounds; ++r) {
    const unsigned which = static_cast<unsigned>(t + r) & 1u;
    const array_ref<std::uint64_t>& a = arrays[which];
    const std::uint64_t i = mix(t * 7 + r) % a.size();
    const std::uint64_t word = i + (which ? high_first : 0);
    bad += a[i] != tools::pattern_word(word * 8);
  }
  if (bad) atomicAdd(wrong, bad);
}

__global__ void out_of_range_kernel(array_ref<std::uint64_t> a, std::uint64_t* out) {
  out[threadIdx.x] = a[a.size() + threadIdx.x];
}

struct gpu_counter {
  unsigned long long* p = nullptr;
  gpu_counter() {
    WARPSTORE_CUDA_TRY(cudaMalloc(&p, sizeof *p));
    WARPSTORE_CUDA_TRY(cudaMemset(p, 0, sizeof *p));
  }
  ~gpu_counter() { cudaFree(p); }
  unsigned long long value() const {
    unsigned long long v = 0;
    WARPSTORE_CUDA_TRY(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
};

options gpu_options(controller_kind kind, std::uint32_t line_size) {
  options o;
  o.controller = kind;
  o.cache_bytes = file_bytes / 16;
  o.line_size = line_size;
  o.service_threads = 8;
  o.queue_depth = 512;
  o.direct = direct_io::off;  // the page cache: the disk would only make the test slow
  o.timeout_ns = 10'000'000'000ull;  // a stall fails the test in seconds
  return o;
}

test::pattern_file& shared_file() {
  static test::pattern_file f(file_bytes);
  return f;
}

struct read_case {
  controller_kind kind;
  std::uint32_t line_size;
};

class GpuArrayRead : public ::testing::TestWithParam<read_case> {};

}  // namespace

TEST_P(GpuArrayRead, ScanEveryByteThroughSixteenthCache) {
  array<std::uint64_t> a(shared_file().path(), 0, gpu_options(GetParam().kind, GetParam().line_size));
  gpu_counter wrong;
  scan_kernel<<<4096, 256>>>(a.ref(), wrong.p);  // 1 M threads
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  a.check();
  EXPECT_EQ(wrong.value(), 0u);
  const cache_stats s = a.stats();
  // Every line was filled, or (a read-only array over the memory
  // controller) read around the cache by a warp that would have waited.
  EXPECT_GE(s.bytes_read + s.read_around * GetParam().line_size, file_bytes);
  if (GetParam().kind == controller_kind::host) {
    EXPECT_EQ(s.read_around, 0u);
  }
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(s.errors, 0u);
}

TEST_P(GpuArrayRead, OversubscribedRandomReadsThroughSixteenthCache) {
  array<std::uint64_t> a(shared_file().path(), 0, gpu_options(GetParam().kind, GetParam().line_size));
  gpu_counter wrong;
  // 1 M threads each want a different random line, far more lines at once
  // than the cache holds (16 K lines of 4 KiB, 1 K of 64 KiB): every read
  // must still finish, right, before the deadline.
  random_kernel<<<4096, 256>>>(a.ref(), 2, 1, wrong.p);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  a.check();
  EXPECT_EQ(wrong.value(), 0u);
  const cache_stats s = a.stats();
  EXPECT_GT(s.misses, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(s.errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    ControllersAndLines, GpuArrayRead,
    ::testing::Values(read_case{controller_kind::host, 4096}, read_case{controller_kind::memory, 4096},
                      read_case{controller_kind::host, 512}, read_case{controller_kind::memory, 512},
                      read_case{controller_kind::memory, 65536},
                      read_case{controller_kind::nvme_model, 4096}),
    [](const auto& info) {
      return test::controller_test_name(info.param.kind) + "_" +
             std::to_string(info.param.line_size);
    });

TEST(GpuArray, ReadSpanAndPinnedLines) {
  for (controller_kind kind : {controller_kind::host, controller_kind::memory}) {
    array<std::uint64_t> a(shared_file().path(), 0, gpu_options(kind, 4096));
    gpu_counter wrong;
    std::uint64_t* scratch = nullptr;
    const unsigned warps = 1024 * 256 / 32;
    WARPSTORE_CUDA_TRY(cudaMalloc(&scratch, sizeof(std::uint64_t) * 1000 * warps));
    span_and_pin_kernel<<<1024, 256>>>(a.ref(), scratch, wrong.p);
    WARPSTORE_CHECK_LAUNCH();
    runtime::synchronize();
    cudaFree(scratch);
    a.check();
    EXPECT_EQ(wrong.value(), 0u) << to_string(kind);
  }
}

// One warp reads element i and a span of `n` from `first`, checking both.
__global__ void element_and_span_kernel(array_ref<std::uint64_t> a, std::uint64_t i,
                                        std::uint64_t first, std::uint64_t n,
                                        std::uint64_t* scratch, unsigned long long* wrong) {
  unsigned long long bad = a[i] != tools::pattern_word(i * 8);
  bad += a.read_span(first, n, scratch) ? 0 : 1;
  __syncwarp();
  for (std::uint64_t k = threadIdx.x; k < n; k += 32)
    bad += scratch[k] != tools::pattern_word((first + k) * 8);
  if (bad) atomicAdd(wrong, bad);
}

TEST(GpuArray, ReadOnlyMemoryArrayReadsAroundALockedSet) {
  // The sets of two lines locked, as by callers picking victims there: a
  // read-only array over the memory controller reads those lines from host
  // memory (the mapped file) rather than wait, right, and counts each
  // group's read; with the locks let go the same reads fill the cache.
  options o = gpu_options(controller_kind::memory, 4096);
  o.timeout_ns = 2'000'000'000ull;  // a wait for the lock would fail with a deadline
  array<std::uint64_t> a(shared_file().path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  ASSERT_TRUE(ref.reads_around());
  constexpr std::uint64_t per_line = 4096 / 8;
  std::uint32_t* locks[2] = {ref.cache.set_locks + ref.cache.set_of(cache_ref::key(ref.source, 77)),
                             ref.cache.set_locks + ref.cache.set_of(cache_ref::key(ref.source, 78))};
  for (std::uint32_t* l : locks) WARPSTORE_CUDA_TRY(cudaMemset(l, 1, 1));
  std::uint64_t* scratch = nullptr;
  const std::uint64_t first = 77 * per_line + 3, n = per_line + 9;  // lines 77 and 78
  WARPSTORE_CUDA_TRY(cudaMalloc(&scratch, sizeof(std::uint64_t) * n));
  gpu_counter wrong;
  element_and_span_kernel<<<1, 32>>>(ref, 77 * per_line + 5, first, n, scratch, wrong.p);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  a.check();
  EXPECT_EQ(wrong.value(), 0u);
  cache_stats s = a.stats();
  EXPECT_EQ(s.misses, 0u);
  // The element's group (a warp of 32 lanes on one line: one group), then
  // the span's two lines.
  EXPECT_EQ(s.read_around, 3u);
  for (std::uint32_t* l : locks) WARPSTORE_CUDA_TRY(cudaMemset(l, 0, 4));
  element_and_span_kernel<<<1, 32>>>(ref, 77 * per_line + 5, first, n, scratch, wrong.p);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  cudaFree(scratch);
  a.check();
  EXPECT_EQ(wrong.value(), 0u);
  s = a.stats();
  EXPECT_EQ(s.read_around, 3u);
  EXPECT_EQ(s.misses, 2u);  // lines 77 and 78, now cached
}

TEST(GpuArray, DivergentCallersOnTwoArraysGetTheirOwnBytes) {
  for (const controller_kind kind : {controller_kind::host, controller_kind::memory}) {
    const options o = gpu_options(kind, 4096);
    auto c = std::make_shared<cache>(o);
    const std::uint64_t half = file_bytes / 2;
    array<std::uint64_t> low(c, make_controller(shared_file().path(), o), half / 8, 0, o);
    array<std::uint64_t> high(c, make_controller(shared_file().path(), o), half / 8, half, o);
    gpu_counter wrong;
    two_arrays_kernel<<<1024, 256>>>(low.ref(), high.ref(), half / 8, 8, wrong.p);
    WARPSTORE_CHECK_LAUNCH();
    runtime::synchronize();
    low.check();
    high.check();
    EXPECT_EQ(wrong.value(), 0u) << to_string(kind);
    EXPECT_GT(c->stats().evictions, 0u) << to_string(kind);
  }
}

TEST(GpuArray, OutOfRangeRaisesIndexError) {
  array<std::uint64_t> a(shared_file().path(), 4096, gpu_options(controller_kind::memory, 4096));
  std::uint64_t* out = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&out, 64 * sizeof *out));
  out_of_range_kernel<<<1, 64>>>(a.ref(), out);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  cudaFree(out);
  try {
    a.check();
    FAIL() << "no error raised";
  } catch (const index_error& e) {
    EXPECT_GE(e.index(), 4096u);
    EXPECT_EQ(e.count(), 64u);
  }
}

TEST(GpuArray, ControllerErrorRaisesIoError) {
  array<std::uint64_t> a(shared_file().path(), 0, gpu_options(controller_kind::host, 4096));
  array_ref<std::uint64_t> ref = a.ref();
  ref.count += 1 << 20;
  ref.end_block += (8 << 20) / 512;
  gpu_counter wrong;
  random_kernel<<<64, 256>>>(ref, 4, 7, wrong.p);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  EXPECT_THROW(a.check(), io_error);
}
