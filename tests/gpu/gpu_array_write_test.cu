// The write path on the GPU: 1 M threads store through a cache 1/16 of the
// data (so nearly every line is written back on eviction), flush, and the
// file must then hold every byte they wrote, for both controllers and both
// deliveries of the host controller.
#include <gtest/gtest.h>

#include <thread>

#include "test_files.h"
#include "write_cases.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"

using namespace warpstore;

namespace {

constexpr std::uint64_t file_bytes = 256ull << 20;
constexpr std::uint64_t new_seed = 5;

__device__ std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

// Grid-stride: together the threads write every element once.
__global__ void store_all_kernel(array_ref<std::uint64_t> a) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < a.size();
       i += stride)
    a.store(i, tools::pattern_word(i * 8, new_seed));
}

// Each warp writes whole spans of 4 lines' worth of elements.
__global__ void write_span_kernel(array_ref<std::uint64_t> a, std::uint64_t span) {
  const std::uint64_t warp_id = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x / 32;
  __shared__ std::uint64_t buf[8][512];  // 256 threads: 8 warps, 4 KiB each
  std::uint64_t* mine = buf[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  for (std::uint64_t first = warp_id * span; first < a.size(); first += warps * span) {
    const std::uint64_t n = a.size() - first < span ? a.size() - first : span;
    for (std::uint64_t k = lane; k < n; k += 32)
      mine[k] = tools::pattern_word((first + k) * 8, new_seed);
    __syncwarp();
    a.write_span(first, n, mine);
    __syncwarp();
  }
}

// Random stores of one element per thread (read-modify-write of the line),
// then one warp of the last block to finish flushes from the device.
__global__ void random_store_kernel(array_ref<std::uint64_t> a, unsigned* blocks_done,
                                    int* flushed) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  const std::uint64_t i = mix(t * 977 + 3) % a.size();
  a.store(i, tools::pattern_word(i * 8, new_seed));
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(blocks_done, 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x < 32) {
    __threadfence();
    const bool ok = a.flush();
    if (threadIdx.x == 0) *flushed = ok ? 1 : -1;
  }
}

// Thread t owns lines t, t + T, t + 2T, ... (T threads): it stores one word
// of each in turn and, after each store, reads back the stored word and a
// never-written word of a random earlier line of its own, which the small
// cache has most likely evicted dirty meanwhile (or is evicting). Counts
// the reads that do not see what they must.
__global__ void store_then_read_back_kernel(array_ref<std::uint64_t> a, unsigned steps,
                                            unsigned long long* wrong) {
  constexpr std::uint64_t per_line = 4096 / 8;
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  const std::uint64_t threads = std::uint64_t{gridDim.x} * blockDim.x;
  unsigned long long bad = 0;
  for (unsigned s = 0; s < steps; ++s) {
    const std::uint64_t line = t + s * threads;
    const std::uint64_t i = line * per_line + line % per_line;
    a.store(i, tools::pattern_word(i * 8, new_seed));
    const std::uint64_t back = t + (mix(t * 31 + s) % (s + 1)) * threads;
    const std::uint64_t j = back * per_line + back % per_line;
    const std::uint64_t kept = back * per_line + (back + per_line / 2) % per_line;
    bad += a[j] != tools::pattern_word(j * 8, new_seed);
    bad += a[kept] != tools::pattern_word(kept * 8);
  }
  if (bad) atomicAdd(wrong, bad);
}

__global__ void read_one_kernel(array_ref<std::uint64_t> a, std::uint64_t* out) {
  *out = a[0];
}

options gpu_options(controller_kind kind, delivery d) {
  options o;
  o.controller = kind;
  o.deliver = d;
  o.writable = true;
  o.cache_bytes = file_bytes / 16;
  o.line_size = 4096;
  o.service_threads = 8;
  o.queue_depth = 512;
  o.direct = direct_io::off;
  o.timeout_ns = 20'000'000'000ull;
  return o;
}

// The words of the test file at `path`, as it is now (at most file_bytes;
// fewer if the file is shorter).
std::vector<std::uint64_t> file_words(const std::string& path) {
  std::vector<std::uint64_t> words(file_bytes / 8);
  tools::detail::fd_guard fd(::open(path.c_str(), O_RDONLY));
  words.resize(tools::detail::pread_all(fd.get(), reinterpret_cast<unsigned char*>(words.data()),
                                        file_bytes, 0, path) /
               8);
  return words;
}

unsigned host_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

using test::write_case;

class GpuArrayWrite : public ::testing::TestWithParam<write_case> {};

}  // namespace

TEST_P(GpuArrayWrite, OneMillionThreadsStoreEveryElementThenFlush) {
  test::pattern_file f(file_bytes);
  array<std::uint64_t> a(f.path(), 0, gpu_options(GetParam().kind, GetParam().deliver));
  store_all_kernel<<<4096, 256>>>(a.ref());  // 1 M threads
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  a.check();
  EXPECT_GT(a.stats().writebacks, 0u);
  a.flush();
  const tools::check_result r = tools::check_pattern_file(f.path(), new_seed, host_threads());
  EXPECT_EQ(r.bytes, file_bytes);
  EXPECT_EQ(r.mismatches, 0u) << "first bad byte " << r.first_bad_offset;
}

TEST_P(GpuArrayWrite, WriteSpansOverwriteWholeLines) {
  test::pattern_file f(file_bytes);
  array<std::uint64_t> a(f.path(), 0, gpu_options(GetParam().kind, GetParam().deliver));
  write_span_kernel<<<4096, 256>>>(a.ref(), 512);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  a.flush();
  const tools::check_result r = tools::check_pattern_file(f.path(), new_seed, host_threads());
  EXPECT_EQ(r.mismatches, 0u) << "first bad byte " << r.first_bad_offset;
  // Whole lines were claimed without reading them first.
  EXPECT_LT(a.stats().bytes_read, file_bytes / 4);
}

TEST_P(GpuArrayWrite, RandomStoresAndADeviceInitiatedFlush) {
  test::pattern_file f(file_bytes);
  array<std::uint64_t> a(f.path(), 0, gpu_options(GetParam().kind, GetParam().deliver));
  unsigned* done = nullptr;
  int* flushed = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&done, sizeof *done));
  WARPSTORE_CUDA_TRY(cudaMalloc(&flushed, sizeof *flushed));
  WARPSTORE_CUDA_TRY(cudaMemset(done, 0, sizeof *done));
  WARPSTORE_CUDA_TRY(cudaMemset(flushed, 0, sizeof *flushed));
  random_store_kernel<<<4096, 256>>>(a.ref(), done, flushed);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  int ok = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpy(&ok, flushed, sizeof ok, cudaMemcpyDeviceToHost));
  cudaFree(done);
  cudaFree(flushed);
  a.check();
  EXPECT_EQ(ok, 1);
  if (GetParam().kind == controller_kind::memory) a.flush();  // pinned memory to the file
  // Every word is either untouched or the new pattern, and the stored ones
  // are new: check the stored indices on the host.
  const std::vector<std::uint64_t> file = file_words(f.path());
  ASSERT_EQ(file.size() * 8, file_bytes);
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < file.size(); ++i)
    bad += file[i] != tools::pattern_word(i * 8) && file[i] != tools::pattern_word(i * 8, new_seed);
  EXPECT_EQ(bad, 0u);
  std::uint64_t stored_wrong = 0;
  for (std::uint64_t t = 0; t < 4096ull * 256; t += 101) {
    std::uint64_t x = t * 977 + 3;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    const std::uint64_t i = x % file.size();
    stored_wrong += file[i] != tools::pattern_word(i * 8, new_seed);
  }
  EXPECT_EQ(stored_wrong, 0u);
}

// Overlapped eviction on the GPU: warps that evict dirty lines of their own
// take the slots at once and send the old bytes and their own READs
// together; reads of an evicted line must still see its bytes (they wait
// for its WRITE), and the file must hold every store after the flush.
TEST_P(GpuArrayWrite, ReadsOfLinesEvictedDirtySeeTheirBytes) {
  test::pattern_file f(file_bytes);
  options o = gpu_options(GetParam().kind, GetParam().deliver);
  o.eager_write_back = false;  // lines stay dirty until evicted
  o.overlapped_eviction = true;
  array<std::uint64_t> a(f.path(), 0, o);
  constexpr std::uint64_t per_line = 4096 / 8;
  const std::uint64_t lines = file_bytes / 4096;  // 65536; the cache holds 4096
  constexpr unsigned blocks = 64, threads = 256, steps = 4;
  static_assert(std::uint64_t{blocks} * threads * steps == (file_bytes / 4096));
  unsigned long long* wrong = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&wrong, sizeof *wrong));
  WARPSTORE_CUDA_TRY(cudaMemset(wrong, 0, sizeof *wrong));
  store_then_read_back_kernel<<<blocks, threads>>>(a.ref(), steps, wrong);
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  unsigned long long w = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpy(&w, wrong, sizeof w, cudaMemcpyDeviceToHost));
  cudaFree(wrong);
  a.check();
  EXPECT_EQ(w, 0u);
  EXPECT_GT(a.stats().overlapped_evictions, 0u);
  a.flush();
  const std::vector<std::uint64_t> file = file_words(f.path());
  ASSERT_EQ(file.size() * 8, file_bytes);
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < file.size(); ++i) {
    const std::uint64_t l = i / per_line;
    const bool stored = l < lines && i == l * per_line + l % per_line;
    bad += file[i] != (stored ? tools::pattern_word(i * 8, new_seed) : tools::pattern_word(i * 8));
  }
  EXPECT_EQ(bad, 0u);
}

INSTANTIATE_TEST_SUITE_P(Controllers, GpuArrayWrite, test::write_cases(), test::write_case_name);

TEST(GpuArrayWriteReadOnly, StoresAreRefusedWithAClearError) {
  test::pattern_file f(1 << 20);
  options o = gpu_options(controller_kind::host, delivery::gpu_pull);
  o.writable = false;
  o.cache_bytes = 1 << 20;
  array<std::uint64_t> a(f.path(), 0, o);
  store_all_kernel<<<1, 32>>>(a.ref());
  WARPSTORE_CHECK_LAUNCH();
  runtime::synchronize();
  try {
    a.check();
    FAIL() << "no error raised";
  } catch (const io_error& e) {
    EXPECT_EQ(e.status().code(), nvme::sc::namespace_write_protected) << e.what();
  }
  std::uint64_t* out = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&out, sizeof *out));
  read_one_kernel<<<1, 1>>>(a.ref(), out);
  WARPSTORE_CHECK_LAUNCH();
  std::uint64_t v = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpy(&v, out, sizeof v, cudaMemcpyDeviceToHost));
  cudaFree(out);
  EXPECT_EQ(v, tools::pattern_word(0));
  EXPECT_EQ(tools::check_pattern_file(f.path(), 0, host_threads()).mismatches, 0u);
}
