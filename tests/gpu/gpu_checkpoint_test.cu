// Checkpoint groups on the GPU: the device form from user kernels (every warp
// its share, the last commits), the host form, a warpstore array in a group,
// both controllers, restore with another chunk size, and the fallback past
// corrupt newest data. Every byte compared.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"
#include "warpstore/detail/hash.cuh"
#include "warpstore/durable/checkpoint.cuh"

namespace {

using namespace warpstore;

options gpu_options(controller_kind kind, std::uint32_t line) {
  options o = options::from_environment();
  o.controller = kind;
  o.line_size = line;
  o.cache_bytes = 64 << 20;
  o.timeout_ns = 60'000'000'000ull;
  o.direct = direct_io::off;  // see the O_DIRECT note in tests/crash/checkpoint_workload_test.cpp
  return o;
}

// Word i of buffer b for `seed`: what fill writes and count_bad expects.
__device__ std::uint32_t value(std::uint32_t b, std::uint64_t i, std::uint32_t seed) {
  return static_cast<std::uint32_t>(
      detail::mix64((std::uint64_t{b} << 40) + i + std::uint64_t{seed} * detail::golden_gamma));
}

__global__ void fill(std::uint32_t* p, std::uint64_t n, std::uint32_t b, std::uint32_t seed) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += gridDim.x * std::uint64_t{blockDim.x})
    p[i] = value(b, i, seed);
}

__global__ void count_bad(const std::uint32_t* p, std::uint64_t n, std::uint32_t b, std::uint32_t seed,
                          unsigned long long* bad) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += gridDim.x * std::uint64_t{blockDim.x})
    if (p[i] != value(b, i, seed)) atomicAdd(bad, 1ull);
}

// A user kernel: each warp first does "work" (fills its part), then
// checkpoints its share of the group; no grid barrier anywhere.
__global__ void checkpoint_kernel(checkpoint_ref ref, checkpoint_outcome* last) {
  const std::uint64_t warp = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  const checkpoint_outcome o = ref.checkpoint(warp, warps);
  if (o != checkpoint_outcome::none && threadIdx.x % 32 == 0) *last = o;
}

__global__ void restore_kernel(checkpoint_ref ref, checkpoint_outcome* last) {
  const std::uint64_t warp = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  const checkpoint_outcome o = ref.restore(warp, warps);
  if (o != checkpoint_outcome::none && threadIdx.x % 32 == 0) *last = o;
}

__global__ void scribble(array_ref<std::uint64_t> a) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < a.size(); i += gridDim.x * std::uint64_t{blockDim.x})
    a.store(i, ~0ull);
}

struct buffers {
  std::vector<std::uint64_t> counts;  // 4-byte elements
  std::vector<runtime::device_ptr<std::uint32_t>> mem;
  explicit buffers(std::vector<std::uint64_t> c) : counts(std::move(c)) {
    for (auto n : counts) mem.push_back(runtime::make_device<std::uint32_t>(n));
  }
  void set(std::uint32_t seed) {
    for (std::uint32_t b = 0; b < counts.size(); ++b) fill<<<64, 256>>>(mem[b].get(), counts[b], b, seed);
    WARPSTORE_CHECK_LAUNCH();
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  }
  std::uint64_t bad(std::uint32_t seed) {
    auto d = runtime::make_device<unsigned long long>(1);
    for (std::uint32_t b = 0; b < counts.size(); ++b) count_bad<<<64, 256>>>(mem[b].get(), counts[b], b, seed, d.get());
    WARPSTORE_CHECK_LAUNCH();
    unsigned long long h = 0;
    runtime::copy_to_host(&h, d.get(), sizeof h);
    return h;
  }
  void add_to(checkpoint_group& g) {
    for (std::uint32_t b = 0; b < counts.size(); ++b) g.add(mem[b].get(), counts[b] * 4, "buffer " + std::to_string(b));
  }
};

class GpuCheckpoint : public ::testing::TestWithParam<std::tuple<controller_kind, std::uint32_t>> {};

TEST_P(GpuCheckpoint, DeviceFormFromUserKernels) {
  const auto [kind, line] = GetParam();
  test::scratch_file f("gpu-ckpt");
  buffers b({1, 1000, 1 << 20, (1 << 22) + 3});
  checkpoint_group g;
  b.add_to(g);
  g.open(f.path, gpu_options(kind, line));
  auto last = runtime::make_device<checkpoint_outcome>(1);
  for (std::uint32_t round = 1; round <= 3; ++round) {
    b.set(round);
    checkpoint_kernel<<<132 * 2, 256>>>(g.ref(), last.get());
    WARPSTORE_CHECK_LAUNCH();
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
    ASSERT_EQ(g.finish(), checkpoint_outcome::committed);
    checkpoint_outcome o{};
    runtime::copy_to_host(&o, last.get(), sizeof o);
    EXPECT_EQ(o, checkpoint_outcome::committed);  // the last warp saw it too
    EXPECT_EQ(g.latest_sequence(), round);
  }
  b.set(77);
  restore_kernel<<<50, 128>>>(g.ref(), last.get());
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  ASSERT_EQ(g.finish(), checkpoint_outcome::restored);
  EXPECT_EQ(b.bad(3), 0u);
  // The host form, and a new group (other chunk size) restoring it.
  b.set(4);
  EXPECT_EQ(g.checkpoint(), 4u);
  b.set(78);
  checkpoint_group h;
  b.add_to(h);
  h.open(f.path, gpu_options(kind, line == 4096 ? 65536 : 4096));
  const restore_result r = h.restore();
  ASSERT_TRUE(r.restored());
  EXPECT_EQ(r.sequence, 4u);
  EXPECT_EQ(b.bad(4), 0u);
}

INSTANTIATE_TEST_SUITE_P(Controllers, GpuCheckpoint,
                         ::testing::Combine(::testing::Values(controller_kind::host, controller_kind::memory,
                                                              controller_kind::nvme_model),
                                            ::testing::Values(4096u, 65536u)));

TEST(GpuCheckpointArray, ArrayAndBufferRoundTrip) {
  test::scratch_file f("gpu-ckpt");
  test::pattern_file data(16 << 20);
  options ao = gpu_options(controller_kind::host, 4096);
  ao.writable = true;
  ao.cache_bytes = 4 << 20;  // a quarter of the array
  array<std::uint64_t> a(data.path(), 0, ao);
  buffers b({100000});
  b.set(9);
  checkpoint_group g;
  g.add(a, "array");
  b.add_to(g);
  g.open(f.path, gpu_options(controller_kind::host, 4096));
  EXPECT_EQ(g.checkpoint(), 1u);
  scribble<<<64, 256>>>(a.ref());
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  a.flush();
  ASSERT_GT(tools::check_pattern_file(data.path(), 0, 8).mismatches, 0u);
  b.set(10);
  const restore_result r = g.restore();  // writes the array back through its cache and flushes it
  ASSERT_TRUE(r.restored());
  EXPECT_EQ(b.bad(9), 0u);
  EXPECT_EQ(tools::check_pattern_file(data.path(), 0, 8).mismatches, 0u);
}

TEST(GpuCheckpointFallback, CorruptNewestDataRestoresThePrevious) {
  test::scratch_file f("gpu-ckpt");
  buffers b({50000});
  checkpoint_group g;
  b.add_to(g);
  g.open(f.path, gpu_options(controller_kind::host, 4096));
  b.set(1);
  g.checkpoint();
  b.set(2);
  g.checkpoint();
  // Slot of checkpoint 2 is slot 1 (checkpoint 1 went to slot 0).
  const int fd = ::open(f.path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::uint32_t junk = 0xDEADBEEF;
  ASSERT_EQ(::pwrite(fd, &junk, 4, static_cast<off_t>(g.layout().slot_offset[1] + 4000)), 4);
  ::close(fd);
  b.set(3);
  const restore_result r = g.restore();
  ASSERT_TRUE(r.restored());
  EXPECT_EQ(r.sequence, 1u);
  EXPECT_EQ(r.skipped, 1u);
  EXPECT_EQ(b.bad(1), 0u);
}

}  // namespace
