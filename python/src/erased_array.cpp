#include <stdexcept>
#include <string>

#include "gather.cuh"
#include "gather.h"
#include "warpstore/runtime.h"

namespace warpstore::python {

erased_array::erased_array(const std::string& path, std::uint64_t rows, std::uint64_t row_bytes,
                           std::uint32_t word_bytes, std::uint64_t byte_offset,
                           const options& opts)
    : rows_(rows), row_bytes_(row_bytes), word_bytes_(word_bytes) {
  if (rows == 0 || row_bytes == 0) throw std::invalid_argument(path + ": the array is empty");
  if (word_bytes == 0 || word_bytes > 16 || (word_bytes & (word_bytes - 1)) != 0 ||
      row_bytes % word_bytes != 0)
    throw std::invalid_argument(path + ": word size " + std::to_string(word_bytes) +
                                " must be a power of two up to 16 dividing the row of " +
                                std::to_string(row_bytes) + " bytes");
  opts.validate();
  const std::uint64_t words = rows * (row_bytes / word_bytes);
  base_ = with_word(word_bytes, [&]<class W>() -> std::unique_ptr<detail::array_base> {
    return std::make_unique<array<W>>(path, words, opts, byte_offset);
  });
  first_bad_ = static_cast<std::uint64_t*>(runtime::alloc_device(sizeof(std::uint64_t)));
}

erased_array::~erased_array() { runtime::free_device(first_bad_); }

std::uint64_t erased_array::gather(const void* idx, std::uint32_t index_bytes, std::uint64_t n,
                                   void* out, std::uintptr_t stream) const {
  if (index_bytes != 4 && index_bytes != 8)
    throw std::invalid_argument("indices must be 32- or 64-bit integers");
  if (n == 0) return no_bad_position;
  const std::uint64_t first_bad = run_gather(*this, idx, index_bytes, n, out, stream, first_bad_);
  if (first_bad == no_bad_position) {
    base_->check();
    return first_bad;
  }
  // A bad index is the caller's error and is what gets reported; the reads
  // the batch did not make cannot have failed, those it made are dropped.
  try {
    base_->check();
  } catch (const io_error&) {
  }
  return first_bad;
}

}  // namespace warpstore::python
