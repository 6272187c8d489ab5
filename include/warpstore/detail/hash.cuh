// Integer hashes, the same on both targets and at compile time. What they
// compute is part of file formats (checkpoint and log checksums), of the
// data pattern every test verifies and of the cache's set placement: their
// arithmetic must never change (tests/cpu/hash_test.cpp pins it).
#pragma once

#include <cstdint>

#include "warpstore/detail/platform.cuh"

namespace warpstore::detail {

// The increment of splitmix64 (2^64 / golden ratio), also a good odd multiplier.
inline constexpr std::uint64_t golden_gamma = 0x9E3779B97F4A7C15ull;

// The finalizer of splitmix64: a bijection of 64-bit words with good avalanche.
WARPSTORE_HD constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64: advances `state` and returns its next output.
WARPSTORE_HD constexpr std::uint64_t splitmix64_next(std::uint64_t& state) {
  state += golden_gamma;
  return mix64(state);
}

// The finalizer of MurmurHash3 (fmix64): the cache's set hash.
WARPSTORE_HD constexpr std::uint64_t murmur3_fmix64(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  k *= 0xC4CEB9FE1A85EC53ull;
  k ^= k >> 33;
  return k;
}

}  // namespace warpstore::detail
