// Test and benchmark data: every 8-byte word of a generated file is a
// function of its byte offset, so any read can be verified without keeping
// a copy of the file.
#pragma once

#include <cstdint>

#include "warpstore/detail/platform.cuh"

namespace warpstore::tools {

// splitmix64 finalizer of the word index (offset / 8), salted by `seed`.
WARPSTORE_HD constexpr std::uint64_t pattern_word(std::uint64_t byte_offset,
                                                  std::uint64_t seed = 0) {
  std::uint64_t z = (byte_offset >> 3) + seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The byte at `byte_offset` of a generated file.
WARPSTORE_HD constexpr std::uint8_t pattern_byte(std::uint64_t byte_offset, std::uint64_t seed = 0) {
  return static_cast<std::uint8_t>(pattern_word(byte_offset & ~std::uint64_t{7}, seed) >>
                                   (8 * (byte_offset & 7)));
}

}  // namespace warpstore::tools
