// The radix sort of a sorted gather (gather_gpu.cu), in a translation unit
// of its own: CUB's sort is among the slowest parts of the extension to
// compile, and apart it builds beside the gather kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace warpstore::python {

// Two buffers of n keys (rows) and two of n positions; the selectors say
// which of each holds the data.
struct sort_buffers {
  std::uint64_t* keys[2];
  std::uint32_t* pos[2];
  int key_current = 0;
  int pos_current = 0;
};

// Scratch bytes radix_sort_pairs needs for n pairs over key bits
// [0, end_bit).
std::size_t radix_sort_scratch(std::uint64_t n, int end_bit);

// Sorts n (key, position) pairs by key bits [0, end_bit) on `stream`
// (stable: equal keys keep their order); the selectors then name the
// sorted buffers. n below 2^31.
void radix_sort_pairs(void* scratch, std::size_t scratch_bytes, sort_buffers& b, std::uint64_t n,
                      int end_bit, cudaStream_t stream);

}  // namespace warpstore::python
