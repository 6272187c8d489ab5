// The GPU target: the gather bodies of gather.cuh as kernels, launched on the
// caller's stream. 1-D gathers run one thread per element; row gathers one
// warp per row.
#include <cuda_runtime.h>

#include <algorithm>

#include "gather.cuh"
#include "gather.h"
#include "warpstore/cuda_check.h"

namespace warpstore::python {

bool target_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace {

constexpr unsigned block_threads = 256;

template <class W, class I>
__global__ void gather_elements_kernel(array_ref<W> a, const I* idx, W* out, std::uint64_t n,
                                       std::uint64_t* first_bad) {
  const std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (k < n) gather_element(a, idx, out, k, first_bad);
}

template <class W, class I>
__global__ void gather_rows_kernel(array_ref<W> a, std::uint64_t rows, std::uint64_t row_words,
                                   const I* idx, W* out, std::uint64_t n,
                                   std::uint64_t* first_bad) {
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  // k is the same for every lane of a warp: each warp walks its rows whole.
  for (std::uint64_t k = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32; k < n;
       k += warps)
    gather_row(a, rows, row_words, idx, out, k, first_bad);
}

template <class W, class I>
void launch(const erased_array& ea, const I* idx, std::uint64_t n, W* out, cudaStream_t s,
            std::uint64_t* first_bad) {
  const array_ref<W> a = static_cast<const array<W>&>(ea.base()).ref();
  const std::uint64_t row_words = ea.row_bytes() / sizeof(W);
  if (row_words == 1) {
    const std::uint64_t blocks = (n + block_threads - 1) / block_threads;
    if (blocks > 0x7fffffffull) throw std::invalid_argument("gather of too many elements at once");
    gather_elements_kernel<<<static_cast<unsigned>(blocks), block_threads, 0, s>>>(a, idx, out, n,
                                                                                  first_bad);
  } else {
    const std::uint64_t warps_per_block = block_threads / 32;
    const std::uint64_t blocks =
        std::min<std::uint64_t>((n + warps_per_block - 1) / warps_per_block, 1u << 20);
    gather_rows_kernel<<<static_cast<unsigned>(blocks), block_threads, 0, s>>>(
        a, ea.rows(), row_words, idx, out, n, first_bad);
  }
  WARPSTORE_CHECK_LAUNCH();
}

}  // namespace

std::uint64_t run_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                         std::uint64_t n, void* out, std::uintptr_t stream,
                         std::uint64_t* first_bad) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  WARPSTORE_CUDA_TRY(cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, s));
  with_word(a.word_bytes(), [&]<class W>() {
    if (index_bytes == 4)
      launch(a, static_cast<const std::int32_t*>(idx), n, static_cast<W*>(out), s, first_bad);
    else
      launch(a, static_cast<const std::int64_t*>(idx), n, static_cast<W*>(out), s, first_bad);
  });
  std::uint64_t result = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpyAsync(&result, first_bad, sizeof result, cudaMemcpyDeviceToHost, s));
  // Errors are raised here, not later: the caller's stream waits for the gather.
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(s));
  return result;
}

}  // namespace warpstore::python

namespace warpstore::python {
int current_device() {
  int d = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&d));
  return d;
}
}  // namespace warpstore::python

namespace warpstore::python {

namespace {
// The UVA ceiling of the gather benchmark: one warp per row reads the row
// straight from pinned host memory over PCIe (no cache, no queues).
__global__ void uva_gather_kernel(const std::byte* src, std::uint64_t row_bytes,
                                  const std::int64_t* idx, std::uint64_t n, std::byte* out) {
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  for (std::uint64_t k = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32; k < n;
       k += warps)
    detail::cooperative_copy(detail::warp::active_mask(), out + k * row_bytes,
                             src + static_cast<std::uint64_t>(idx[k]) * row_bytes,
                             static_cast<std::uint32_t>(row_bytes));
}
}  // namespace

void uva_gather(const void* host_src, std::uint64_t row_bytes, const std::int64_t* idx,
                std::uint64_t n, void* out, std::uintptr_t stream) {
  if (row_bytes % 16 != 0 || reinterpret_cast<std::uintptr_t>(host_src) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(out) % 16 != 0)
    throw std::invalid_argument("uva_gather: rows and buffers must be 16-byte aligned");
  void* src = nullptr;
  WARPSTORE_CUDA_TRY(cudaHostGetDevicePointer(&src, const_cast<void*>(host_src), 0));
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const std::uint64_t blocks = std::min<std::uint64_t>((n + 7) / 8, 1u << 20);
  if (n == 0) return;
  uva_gather_kernel<<<static_cast<unsigned>(blocks), block_threads, 0, s>>>(
      static_cast<const std::byte*>(src), row_bytes, idx, n, static_cast<std::byte*>(out));
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(s));
}

}  // namespace warpstore::python
