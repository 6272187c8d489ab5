// warpstore load: a file's bytes copied into an array through the library's
// own write path, made durable, then read back from the device and compared.
// One source for both targets (load.cpp; load.cu builds it for the GPU).
#pragma once

#include <cstdint>
#include <string>

#include "gather.h"
#include "warpstore/settings.h"

namespace warpstore::python {

inline constexpr std::uint64_t no_mismatch = ~std::uint64_t{0};

struct load_result {
  std::uint64_t bytes = 0;
  double write_seconds = 0;   // the copy into the array and the flush
  double verify_seconds = 0;  // the read back and the comparison
  // The first byte of `src` that the device does not hold (counted from
  // the start of src), or no_mismatch when every byte compared equal.
  std::uint64_t first_mismatch = ~std::uint64_t{0};
};

// Copies the bytes of the file `src` into `dst` (a file or an nvme:// path,
// opened writable with `opts`) from byte `offset` (a multiple of 512), in
// chunks of `chunk_bytes`, written by run_warps bodies through
// array_ref::write_span; flushes; then opens `dst` again read-only with a
// fresh cache and reads every byte back with read_span. Raises file_error
// for a src that cannot be read, invalid_argument for an empty src, an
// offset that is not a multiple of 512 or a dst too small (before anything
// is written), what the array raises otherwise. `poll` is asked between
// chunks; when it returns true the copy stops with `cancelled`.
load_result load_file(const std::string& src, const std::string& dst, std::uint64_t offset,
                      options opts, std::uint64_t chunk_bytes, const interrupt_poll& poll);

// The chunk load_file copies at a time unless told otherwise.
inline constexpr std::uint64_t load_chunk_bytes = std::uint64_t{64} << 20;

}  // namespace warpstore::python
