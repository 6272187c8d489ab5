// Bulk reads into GPU memory (array_base::read_range, src/controller/bulk_reader.h):
// pinned double buffers and a copy stream a thread, buffered and O_DIRECT,
// ranges across chunk boundaries at offsets aligned to nothing, a stream
// whose earlier work the copies must follow, and host destinations on the
// GPU build. Every byte is compared on the host.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "controller/bulk_reader.h"
#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"
#include "warpstore/runtime.h"

using namespace warpstore;
using host_detail::bulk_reader;

namespace {

std::vector<std::byte> file_bytes(const std::string& path, std::uint64_t n) {
  std::vector<std::byte> b(n);
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, b.data(), n, 0), static_cast<ssize_t>(n));
  ::close(fd);
  return b;
}

// Bytes of device memory `d` (n bytes) that differ from want[off, off + n).
std::size_t device_mismatches(const std::byte* d, std::uint64_t n, const std::vector<std::byte>& want,
                              std::uint64_t off) {
  std::vector<std::byte> got(n);
  WARPSTORE_CUDA_TRY(cudaMemcpy(got.data(), d, n, cudaMemcpyDeviceToHost));
  std::size_t bad = 0;
  for (std::uint64_t i = 0; i < n; ++i) bad += got[i] != want[off + i];
  return bad;
}

__global__ void spin_then_fill(std::byte* p, std::uint64_t n, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    p[i] = std::byte{0x5A};
}

}  // namespace

// The bulk reader's bounce buffers (runtime::alloc_host_pinned): pinned, so
// copies from them are asynchronous DMA; sizes that are not whole 2 MiB
// pages; freed without a CUDA error left behind.
TEST(GpuBulkRead, PinnedBounceBuffers) {
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, (std::size_t{5} << 20) + 7,
                                  std::size_t{4} << 20}) {
    const std::size_t n = bytes == 0 ? 1 : bytes;
    auto p = runtime::make_host_pinned<std::byte>(bytes);
    ASSERT_NE(p.get(), nullptr);
    cudaPointerAttributes attr{};
    WARPSTORE_CUDA_TRY(cudaPointerGetAttributes(&attr, p.get()));
    EXPECT_EQ(attr.type, cudaMemoryTypeHost) << bytes << " bytes: not pinned";
    for (std::size_t i = 0; i < n; ++i) p.get()[i] = std::byte(i * 7 + 1);
    std::byte* d = nullptr;
    WARPSTORE_CUDA_TRY(cudaMalloc(&d, n));
    WARPSTORE_CUDA_TRY(cudaMemcpyAsync(d, p.get(), n, cudaMemcpyHostToDevice, 0));
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
    std::vector<std::byte> want(p.get(), p.get() + n);
    EXPECT_EQ(device_mismatches(d, n, want, 0), 0u) << bytes << " bytes";
    WARPSTORE_CUDA_TRY(cudaFree(d));
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(GpuBulkRead, AwkwardRangesIntoDeviceMemory) {
  const std::uint64_t size = (64ull << 20) + 333;
  test::pattern_file file(size);
  const std::vector<std::byte> want = file_bytes(file.path(), size);
  std::byte* d = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&d, size + 64));
  for (const direct_io mode : {direct_io::off, direct_io::on}) {
    std::shared_ptr<backing_file> f;
    try {
      f = std::make_shared<backing_file>(file.path(), mode);
    } catch (const file_error&) {
      continue;  // no O_DIRECT on this filesystem
    }
    for (const std::uint64_t chunk : {bulk_reader::chunk_granule, bulk_reader::default_chunk_bytes}) {
      bulk_reader reader(bulk_reader::config{chunk, 4});
      const std::pair<std::uint64_t, std::uint64_t> ranges[] = {
          {0, size}, {1, 1}, {chunk - 3, 9}, {4095, 5 * chunk + 17}, {size - chunk - 1, chunk + 1}};
      for (const auto& [off, len] : ranges)
        for (const std::uint64_t shift : {0u, 3u}) {
          reader.read(*f, off, len, d + shift);
          EXPECT_EQ(device_mismatches(d + shift, len, want, off), 0u)
              << "offset " << off << " bytes " << len << " chunk " << chunk << " +" << shift;
        }
    }
  }
  WARPSTORE_CUDA_TRY(cudaFree(d));
}

TEST(GpuBulkRead, CopiesFollowTheCallersStream) {
  const std::uint64_t size = 16ull << 20;
  test::pattern_file file(size);
  const std::vector<std::byte> want = file_bytes(file.path(), size);
  array<std::uint64_t> a(file.path());
  std::byte* d = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&d, size));
  cudaStream_t s = nullptr;
  WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // A kernel that writes the destination late: the read must land after it.
  spin_then_fill<<<64, 256, 0, s>>>(d, size, 200'000'000);
  WARPSTORE_CUDA_TRY(cudaGetLastError());
  a.read_range(0, size, d, reinterpret_cast<std::uintptr_t>(s));
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(s));
  EXPECT_EQ(device_mismatches(d, size, want, 0), 0u);
  WARPSTORE_CUDA_TRY(cudaStreamDestroy(s));
  WARPSTORE_CUDA_TRY(cudaFree(d));
}

TEST(GpuBulkRead, HostDestinationsAndWritableArrays) {
  const std::uint64_t size = 8ull << 20;
  test::pattern_file file(size);
  options o;
  o.writable = true;
  o.cache_bytes = 1 << 20;
  array<std::uint64_t> a(file.path(), 0, o);
  std::vector<std::uint64_t> host(size / 8);
  a.read_range(0, size, host.data());
  for (std::uint64_t i = 0; i < host.size(); ++i)
    ASSERT_EQ(host[i], tools::pattern_word(i * 8)) << "word " << i;
  EXPECT_THROW(a.read_range(size - 8, 16, host.data()), warpstore::invalid_argument);
}

// The memory controller, a small cache: over a read-only file it maps and
// pins the file's page cache.
namespace {
options memory_controller_options() {
  options o;
  o.controller = controller_kind::memory;
  o.cache_bytes = 1 << 20;
  return o;
}
}  // namespace

// The memory controller over a read-only file maps and pins the file's page
// cache: a bulk read into GPU memory is the copy engine reading that
// mapping (bulk_reader::copy_pinned: no lane, no pread), at the array's
// byte offset, after the caller's stream; host destinations keep pread.
TEST(GpuBulkRead, MemoryControllerCopiesFromTheMappedPageCache) {
  const std::uint64_t size = (80ull << 20) + 333;  // two pieces and a part, a partial last page
  test::pattern_file file(size);
  const std::vector<std::byte> want = file_bytes(file.path(), size);
  const std::uint64_t offset = 4096;
  array<std::uint64_t> a(file.path(), 0, memory_controller_options(), offset);
  ASSERT_TRUE(a.shared_controller()->maps_file())
      << "the driver refused to pin the file's mapping: this test proves nothing";
  const std::uint64_t bytes = a.size_bytes();
  std::byte* d = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&d, bytes + 64));
  cudaStream_t s = nullptr;
  WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::pair<std::uint64_t, std::uint64_t> ranges[] = {
      {0, bytes}, {1, 1}, {bytes - 1, 1}, {4095, bulk_reader::pinned_piece_bytes + 17},
      {bytes - bulk_reader::pinned_piece_bytes - 3, bulk_reader::pinned_piece_bytes + 3}};
  for (const auto& [off, len] : ranges)
    for (const std::uint64_t shift : {0u, 3u}) {
      const bulk_read_stats before = bulk_read_totals();
      // A kernel that writes the destination late: the copy must land after it.
      spin_then_fill<<<64, 256, 0, s>>>(d, bytes + 64, 20'000'000);
      WARPSTORE_CUDA_TRY(cudaGetLastError());
      a.read_range(off, len, d + shift, reinterpret_cast<std::uintptr_t>(s));
      WARPSTORE_CUDA_TRY(cudaStreamSynchronize(s));
      EXPECT_EQ(device_mismatches(d + shift, len, want, offset + off), 0u)
          << "offset " << off << " bytes " << len << " +" << shift;
      const bulk_read_stats after = bulk_read_totals();
      EXPECT_EQ(after.calls, before.calls + 1);
      EXPECT_EQ(after.bytes, before.bytes + len);
      EXPECT_EQ(after.lanes, before.lanes) << "the read went through pread's lanes";
      EXPECT_EQ(after.chunks - before.chunks,
                (len + bulk_reader::pinned_piece_bytes - 1) / bulk_reader::pinned_piece_bytes);
    }
  // A host destination: pread's threads, the same bytes.
  std::vector<std::byte> host(1 << 20);
  const bulk_read_stats before = bulk_read_totals();
  a.read_range(12345, host.size(), host.data());
  EXPECT_GT(bulk_read_totals().lanes, before.lanes);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != want[offset + 12345 + i];
  EXPECT_EQ(bad, 0u);
  WARPSTORE_CUDA_TRY(cudaStreamDestroy(s));
  WARPSTORE_CUDA_TRY(cudaFree(d));
}

// Interrupted between pieces: cancelled, with the path; the array reads
// again after it.
TEST(GpuBulkRead, MemoryControllerCopyIsInterruptible) {
  const std::uint64_t size = 256ull << 20;
  test::pattern_file file(size);
  array<std::uint64_t> a(file.path(), 0, memory_controller_options());
  ASSERT_TRUE(a.shared_controller()->maps_file());
  std::byte* d = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&d, size));
  int polls = 0;
  try {
    a.read_range(0, size, d, 0, [&] { return ++polls >= 1; });
    FAIL() << "an interrupted read finished";
  } catch (const warpstore::runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::cancelled);
    EXPECT_EQ(e.path(), file.path());
  }
  EXPECT_EQ(polls, 1);
  a.read_range(0, size, d);
  const std::vector<std::byte> want = file_bytes(file.path(), size);
  EXPECT_EQ(device_mismatches(d, size, want, 0), 0u);
  WARPSTORE_CUDA_TRY(cudaFree(d));
}
