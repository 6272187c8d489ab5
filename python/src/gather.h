// What the Python extension asks of a target: gather positions [0, n) of an
// index vector into an output buffer. Implemented once per target
// (gather_gpu.cu, gather_cpu.cpp) over the shared bodies of gather.cuh.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "warpstore/array.cuh"

namespace warpstore::python {

// A storage-backed array whose element type is erased: `word_bytes` is the
// size of the words the cache serves (the dtype's size for 1-D arrays, the
// largest power of two up to 16 dividing the row for [N, D] arrays).
class erased_array {
 public:
  erased_array(const std::string& path, std::uint64_t rows, std::uint64_t row_bytes,
               std::uint32_t word_bytes, std::uint64_t byte_offset, const options& opts);
  ~erased_array();
  erased_array(const erased_array&) = delete;
  erased_array& operator=(const erased_array&) = delete;

  std::uint64_t rows() const { return rows_; }
  std::uint64_t row_bytes() const { return row_bytes_; }
  std::uint32_t word_bytes() const { return word_bytes_; }
  detail::array_base& base() const { return *base_; }

  // Gathers rows idx[0..n) (signed 32- or 64-bit, `index_bytes`) into `out`
  // (n * row_bytes). Both pointers are device memory on the GPU target, host
  // memory on the CPU target. `stream` orders the work on the GPU (a
  // cudaStream_t; 0 the default stream) and is synchronized before return.
  // Returns the first position whose index is out of range, or
  // no_bad_position; raises io_error for a failed read.
  std::uint64_t gather(const void* idx, std::uint32_t index_bytes, std::uint64_t n, void* out,
                       std::uintptr_t stream) const;

 private:
  std::uint64_t rows_;
  std::uint64_t row_bytes_;
  std::uint32_t word_bytes_;
  std::unique_ptr<detail::array_base> base_;  // an array<word<word_bytes>>
  std::uint64_t* first_bad_ = nullptr;        // device word, one per array
};

// True when this target can run (a GPU is visible, or the CPU target).
bool target_available();
// Runs the launch for this target; defined in gather_gpu.cu / gather_cpu.cpp.
std::uint64_t run_gather(const erased_array& a, const void* idx, std::uint32_t index_bytes,
                         std::uint64_t n, void* out, std::uintptr_t stream,
                         std::uint64_t* first_bad);

}  // namespace warpstore::python

namespace warpstore::python {
// The CUDA device arrays open on (the current one), or -1 on the CPU target.
int current_device();
}  // namespace warpstore::python

namespace warpstore::python {
// GPU build only: the benchmark's UVA path, rows idx[0..n) of pinned host
// memory `host_src` copied to device memory `out` by one warp per row.
void uva_gather(const void* host_src, std::uint64_t row_bytes, const std::int64_t* idx,
                std::uint64_t n, void* out, std::uintptr_t stream);
}  // namespace warpstore::python
