// Asynchronous batches from warps (array_ref::prefetch / wait / release,
// post_write_back): every warp posts a span, computes, waits, then checks the
// span through the cache; spans overlap across warps; failures injected in
// the host controller surface at the wait with index, LBA and status.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "controller/fault_policy.h"
#include "controller/host_controller.h"
#include "test_files.h"
#include "write_cases.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"

using namespace warpstore;

namespace {

constexpr std::uint64_t file_bytes = 256ull << 20;
constexpr std::uint64_t per_line = 4096 / 8;

__device__ std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

struct counts {
  unsigned long long wrong, failed_waits, misses_after, not_held;
};

// Each warp, `rounds` times: prefetch a span (overlapping other warps'
// when `overlap`), do some arithmetic, wait, check the span through
// pinned_element (pin) or operator[] (no pin), release. The check loop's
// trip count differs between lanes when n % 32 != 0, so lanes may reach
// release() and the next prefetch/wait in groups: the ticket's mask (the
// posting lanes) keeps wait and release over the lanes that posted.
__global__ void batch_kernel(array_ref<std::uint64_t> a, int rounds, std::uint64_t max_span,
                             bool overlap, bool pin, counts* out) {
  const std::uint64_t warp_id = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  unsigned long long bad = 0, failed = 0, not_held = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::uint64_t h = mix(warp_id * 977 + r);
    const std::uint64_t n = 1 + h % max_span;
    const std::uint64_t range = overlap ? 64 * per_line : a.size();
    const std::uint64_t first = mix(h) % (range - n);
    batch_ticket t = a.prefetch(first, n, pin);
    float x = static_cast<float>(lane);
    for (int k = 0; k < 256; ++k) x = x * 1.0001f + 0.5f;  // work while the reads fly
    if (x < 0) ++bad;
    if (!a.wait(t)) {
      ++failed;
      continue;
    }
    for (std::uint64_t i = first + lane; i < first + n; i += 32) {
      std::uint64_t v;
      if (pin) {
        // nullptr: the line is not held published (a claim never filled
        // reads as zeros otherwise).
        const std::uint64_t* p = a.pinned_element(i);
        not_held += p == nullptr;
        v = p ? *p : ~tools::pattern_word(i * 8);
      } else {
        v = a[i];
      }
      bad += v != tools::pattern_word(i * 8);
    }
    a.release(t);
  }
  if (lane == 0 && failed) atomicAdd(&out->failed_waits, failed);
  if (bad) atomicAdd(&out->wrong, bad);
  if (not_held) atomicAdd(&out->not_held, not_held);
}

// One warp per tile, double-buffered: the batch of tile k+1 is posted before
// tile k is summed; every tile's sum is checked.
__global__ void double_buffer_kernel(array_ref<std::uint64_t> a, std::uint64_t tile,
                                     std::uint64_t tiles, counts* out) {
  const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x / 32;
  const std::uint64_t w = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  unsigned long long bad = 0;
  std::uint64_t k = w;
  if (k >= tiles) return;
  batch_ticket cur = a.prefetch(k * tile, tile, true);
  if (!a.wait(cur) && lane == 0) atomicAdd(&out->failed_waits, 1ull);
  for (; k < tiles; k += warps) {
    batch_ticket next;
    const bool more = k + warps < tiles;
    if (more) next = a.prefetch((k + warps) * tile, tile, true);
    std::uint64_t sum = 0, want = 0;
    for (std::uint64_t i = k * tile + lane; i < (k + 1) * tile; i += 32) {
      const std::uint64_t* p = a.pinned_element(i);
      sum += p ? *p : 0;
      want += tools::pattern_word(i * 8);
    }
    bad += sum != want;
    a.release(cur);
    if (more) {
      if (!a.wait(next) && lane == 0) atomicAdd(&out->failed_waits, 1ull);
      cur = next;
    }
  }
  if (bad) atomicAdd(&out->wrong, bad);
}

__global__ void store_then_post_write_back(array_ref<std::uint64_t> a, std::uint64_t span,
                                           counts* out) {
  const std::uint64_t w = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  const std::uint64_t first = w * span;
  for (std::uint64_t i = first + lane; i < first + span; i += 32)
    a.store(i, ~tools::pattern_word(i * 8));
  __syncwarp();
  batch_ticket t = a.post_write_back(first, span);
  if (!a.wait(t) && lane == 0) atomicAdd(&out->failed_waits, 1ull);
}

options gpu_options(controller_kind kind) {
  options o;
  o.controller = kind;
  o.cache_bytes = 128ull << 20;  // half the file: pins of all warps spread thin
  o.service_threads = 4;
  o.direct = direct_io::off;
  o.timeout_ns = 30'000'000'000ull;
  return o;
}

counts run(void (*launch)(counts*)) {
  counts* d = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&d, sizeof(counts)));
  WARPSTORE_CUDA_TRY(cudaMemset(d, 0, sizeof(counts)));
  launch(d);
  WARPSTORE_CUDA_TRY(cudaGetLastError());
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  counts h{};
  WARPSTORE_CUDA_TRY(cudaMemcpy(&h, d, sizeof(counts), cudaMemcpyDeviceToHost));
  WARPSTORE_CUDA_TRY(cudaFree(d));
  return h;
}

class GpuBatch : public ::testing::TestWithParam<controller_kind> {
 protected:
  static void SetUpTestSuite() { file_ = std::make_unique<test::pattern_file>(file_bytes); }
  static void TearDownTestSuite() { file_.reset(); }
  static std::unique_ptr<test::pattern_file> file_;
};
std::unique_ptr<test::pattern_file> GpuBatch::file_;

array_ref<std::uint64_t> g_ref;  // for the launch lambdas
bool g_overlap, g_pin;

}  // namespace

INSTANTIATE_TEST_SUITE_P(Controllers, GpuBatch,
                         ::testing::Values(controller_kind::host, controller_kind::memory,
                                           controller_kind::nvme_model),
                         [](const ::testing::TestParamInfo<controller_kind>& i) {
                           return test::controller_test_name(i.param);
                         });

TEST_P(GpuBatch, WarpsPrefetchWaitAndRead) {
  array<std::uint64_t> a(file_->path(), 0, gpu_options(GetParam()));
  g_ref = a.ref();
  for (bool overlap : {false, true})
    for (bool pin : {true, false}) {
      g_overlap = overlap;
      g_pin = pin;
      const counts c = run([](counts* d) {
        batch_kernel<<<132, 128>>>(g_ref, 8, 6 * per_line, g_overlap, g_pin, d);
      });
      EXPECT_EQ(c.wrong, 0u) << "overlap " << overlap << " pin " << pin;
      EXPECT_EQ(c.not_held, 0u) << "overlap " << overlap << " pin " << pin;
      EXPECT_EQ(c.failed_waits, 0u) << "overlap " << overlap << " pin " << pin;
      a.check();
    }
  EXPECT_EQ(a.stats().errors, 0u);
}

TEST_P(GpuBatch, DoubleBufferedTiles) {
  array<std::uint64_t> a(file_->path(), 0, gpu_options(GetParam()));
  g_ref = a.ref();
  const counts c = run([](counts* d) {
    const std::uint64_t tile = 16 * per_line + 100;  // not line-aligned: tiles share lines
    double_buffer_kernel<<<132, 64>>>(g_ref, tile, g_ref.size() / tile, d);
  });
  EXPECT_EQ(c.wrong, 0u);
  EXPECT_EQ(c.failed_waits, 0u);
  a.check();
}

TEST_P(GpuBatch, OutOfRangeSurfacesAtWait) {
  array<std::uint64_t> a(file_->path(), 1000000, gpu_options(GetParam()));
  g_ref = a.ref();
  const counts c = run([](counts* d) {
    double_buffer_kernel<<<1, 32>>>(g_ref, 600000, 2, d);  // tile 1 ends past the array
  });
  EXPECT_EQ(c.failed_waits, 1u);
  EXPECT_THROW(a.check(), index_error);
}

TEST_P(GpuBatch, PostedWriteBack) {
  const test::pattern_file f(16 << 20);
  options o = gpu_options(GetParam());
  o.writable = true;
  o.eager_write_back = false;
  array<std::uint64_t> a(f.path(), 0, o);
  g_ref = a.ref();
  const std::uint64_t before = a.stats().writebacks;
  const counts c = run([](counts* d) {
    store_then_post_write_back<<<8, 128>>>(g_ref, 16 * per_line, d);  // 32 warps * 16 lines
  });
  EXPECT_EQ(c.failed_waits, 0u);
  EXPECT_EQ(a.stats().writebacks - before, 32u * 16u);
  a.flush();
  std::vector<std::uint64_t> back(32 * 16 * per_line);
  const int fd = ::open(f.path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, back.data(), back.size() * 8, 0), static_cast<ssize_t>(back.size() * 8));
  ::close(fd);
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 0; i < back.size(); ++i) wrong += back[i] != ~tools::pattern_word(i * 8);
  EXPECT_EQ(wrong, 0u);
}

TEST(GpuBatchFaults, ReadErrorSurfacesAtWait) {
  const test::pattern_file f(64 << 20);
  options o = gpu_options(controller_kind::host);
  fault_plan plan;
  plan.kind = fault_kind::io_error;
  plan.lbas = {37 * 8 + 2};  // inside line 37
  auto faults = std::make_shared<planned_faults>(plan);
  auto file = std::make_shared<backing_file>(f.path(), direct_io::off);
  auto ctl = std::make_shared<host_controller>(file, o, o.line_size, faults);
  array<std::uint64_t> a(std::make_shared<warpstore::cache>(o), ctl, 0, 0, o);
  g_ref = a.ref();
  const counts c = run([](counts* d) {
    double_buffer_kernel<<<1, 32>>>(g_ref, 10 * per_line, 8, d);  // tile 3 holds line 37
  });
  EXPECT_EQ(c.failed_waits, 1u);
  try {
    a.check();
    ADD_FAILURE() << "no error raised";
  } catch (const io_error& e) {
    EXPECT_EQ(e.kind(), error_kind::io);
    EXPECT_EQ(e.lba(), 37u * 8u);
    EXPECT_EQ(e.index(), 37u * per_line);
  }
}
