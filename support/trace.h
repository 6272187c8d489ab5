// Access traces shared by every benchmark and ceiling: request i of a run
// reads block trace::index(i). The same function runs on the CPU (io_uring
// ceiling) and on the GPU (kernels), so both read exactly the same blocks.
// Uniform and sequential traces are counter-based (no memory); a zipf trace
// is an index array precomputed on the host (zipf.h) and passed by pointer.
#pragma once

#include <cstdint>

#include "warpstore/detail/hash.cuh"
#include "warpstore/detail/platform.cuh"

namespace warpstore::bench {

// High 64 bits of a * b: maps a uniform 64-bit word onto [0, n).
WARPSTORE_HD inline std::uint64_t mul_high(std::uint64_t a, std::uint64_t b) {
#if WARPSTORE_ON_GPU
  return __umul64hi(a, b);
#else
  __extension__ typedef unsigned __int128 u128;
  return static_cast<std::uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
}

// The i-th word of the random stream `seed`: counter-based, so any thread can
// produce any element without state.
WARPSTORE_HD constexpr std::uint64_t stream_word(std::uint64_t seed, std::uint64_t i) {
  return warpstore::detail::mix64(i * 0xD1B54A32D192ED03ull + warpstore::detail::mix64(seed ^ 0x6A09E667F3BCC909ull));
}

// Uniform double in [0, 1) from the i-th word of stream `seed`.
WARPSTORE_HD constexpr double stream_unit(std::uint64_t seed, std::uint64_t i) {
  return static_cast<double>(stream_word(seed, i) >> 11) * 0x1.0p-53;
}

enum class access : std::uint32_t {
  sequential,  // block i mod blocks
  uniform,     // uniform random block, counter-based on (seed, i)
  indexed,     // indices[i] (zipf or any precomputed list)
};

struct trace {
  access kind = access::uniform;
  std::uint64_t seed = 1;
  std::uint64_t blocks = 1;                // blocks in the file; indices are < blocks
  const std::uint64_t* indices = nullptr;  // access::indexed: memory the caller can read

  WARPSTORE_HD std::uint64_t index(std::uint64_t i) const {
    switch (kind) {
      case access::sequential: return i % blocks;
      case access::uniform: return mul_high(stream_word(seed, i), blocks);
      default: return indices[i];
    }
  }

  static trace sequential(std::uint64_t blocks) { return {access::sequential, 0, blocks, nullptr}; }
  static trace uniform(std::uint64_t seed, std::uint64_t blocks) {
    return {access::uniform, seed, blocks, nullptr};
  }
  static trace indexed(const std::uint64_t* indices, std::uint64_t blocks) {
    return {access::indexed, 0, blocks, indices};
  }
  // The same trace reading its indices from another copy of the array (a
  // device copy of a host-built zipf list).
  trace with_indices(const std::uint64_t* other) const {
    trace t = *this;
    t.indices = other;
    return t;
  }
};

// "sequential" / "random" (uniform) / "zipf".
inline const char* access_name(access a) {
  switch (a) {
    case access::sequential: return "sequential";
    case access::uniform: return "random";
    default: return "zipf";
  }
}

}  // namespace warpstore::bench
