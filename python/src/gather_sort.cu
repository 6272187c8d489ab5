// The radix sort of a sorted gather (gather_sort.h): CUB's DeviceRadixSort
// over double buffers.
#include <cub/device/device_radix_sort.cuh>

#include "gather_sort.h"
#include "warpstore/cuda_check.h"

namespace warpstore::python {

namespace {
// scratch nullptr: sets scratch_bytes and sorts nothing.
void run(void* scratch, std::size_t& scratch_bytes, sort_buffers& b, std::uint64_t n, int end_bit,
         cudaStream_t stream) {
  cub::DoubleBuffer<std::uint64_t> keys(b.keys[b.key_current], b.keys[1 - b.key_current]);
  cub::DoubleBuffer<std::uint32_t> pos(b.pos[b.pos_current], b.pos[1 - b.pos_current]);
  WARPSTORE_CUDA_TRY(cub::DeviceRadixSort::SortPairs(scratch, scratch_bytes, keys, pos,
                                                     static_cast<int>(n), 0, end_bit, stream));
  if (scratch == nullptr) return;
  b.key_current = keys.Current() == b.keys[0] ? 0 : 1;
  b.pos_current = pos.Current() == b.pos[0] ? 0 : 1;
}
}  // namespace

std::size_t radix_sort_scratch(std::uint64_t n, int end_bit) {
  sort_buffers none{};
  std::size_t bytes = 0;
  run(nullptr, bytes, none, n, end_bit, nullptr);
  return bytes;
}

void radix_sort_pairs(void* scratch, std::size_t scratch_bytes, sort_buffers& b, std::uint64_t n,
                      int end_bit, cudaStream_t stream) {
  run(scratch, scratch_bytes, b, n, end_bit, stream);
}

}  // namespace warpstore::python
