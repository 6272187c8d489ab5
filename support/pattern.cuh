// Test and benchmark data: every 8-byte word of a generated file is a
// function of its byte offset, so any read can be verified without keeping
// a copy of the file.
#pragma once

#include <cstdint>

#include "warpstore/detail/hash.cuh"
#include "warpstore/detail/platform.cuh"

namespace warpstore::tools {

// splitmix64 finalizer of the word index (offset / 8), salted by `seed`.
WARPSTORE_HD constexpr std::uint64_t pattern_word(std::uint64_t byte_offset,
                                                  std::uint64_t seed = 0) {
  return warpstore::detail::mix64((byte_offset >> 3) + seed * warpstore::detail::golden_gamma + 0x632BE59BD9B4E019ull);
}

// The byte at `byte_offset` of a generated file.
WARPSTORE_HD constexpr std::uint8_t pattern_byte(std::uint64_t byte_offset, std::uint64_t seed = 0) {
  return static_cast<std::uint8_t>(pattern_word(byte_offset & ~std::uint64_t{7}, seed) >>
                                   (8 * (byte_offset & 7)));
}

}  // namespace warpstore::tools
