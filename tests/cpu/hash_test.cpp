// The hashes are part of what is on disk and of where the cache puts a line:
// known values, computed once from the formulas, must never change.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/pattern.cuh"
#include "warpstore/cache.cuh"
#include "warpstore/detail/hash.cuh"
#include "warpstore/durable/checkpoint.cuh"

using namespace warpstore;

namespace {

TEST(Hash, Mix64IsTheSplitmix64Finalizer) {
  static_assert(detail::mix64(0) == 0);
  EXPECT_EQ(detail::mix64(1), 0x5692161D100B05E5ull);
  EXPECT_EQ(detail::mix64(0x123456789ABCDEF0ull), 0x9629F58E8EC5B906ull);
}

TEST(Hash, Splitmix64FromZeroGivesTheReferenceStream) {
  std::uint64_t s = 0;
  EXPECT_EQ(detail::splitmix64_next(s), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(detail::splitmix64_next(s), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(detail::splitmix64_next(s), 0x06C45D188009454Full);
}

TEST(Hash, Murmur3Fmix64) {
  EXPECT_EQ(detail::murmur3_fmix64(1), 0xB456BCFC34C2CB2Cull);
  EXPECT_EQ(detail::murmur3_fmix64(0x123456789ABCDEF0ull), 0x18B8C062F6F42398ull);
}

// Generated files hold this pattern; results and tests verify against it.
TEST(Hash, PatternWordsAreUnchanged) {
  static_assert(tools::pattern_word(0) == 0x6DB6CA64564DAEAAull);
  EXPECT_EQ(tools::pattern_word(8), 0x6F8AAEAC2856BDDBull);
  EXPECT_EQ(tools::pattern_word(4096, 7), 0xAD19FFC2BC95F63Dull);
}

TEST(Hash, CheckpointWordMixIsUnchanged) {
  EXPECT_EQ(ckpt::mix(1, 2), 0xFA427CF8B0E7A1C0ull);
}

TEST(Hash, CacheSetsAndEvictionSlotsAreUnchanged) {
  std::vector<std::uint32_t> in_flight(1u << 16, 0);
  cache_ref c{};
  c.evictions_in_flight = in_flight.data();
  c.eviction_mask = (1u << 16) - 1;
  c.num_sets = 1000;
  EXPECT_EQ(c.set_of(cache_ref::key(1, 0)), 686u);
  EXPECT_EQ(c.set_of(cache_ref::key(1, 12345)), 59u);
  c.num_sets = 7;
  EXPECT_EQ(c.set_of(cache_ref::key(3, 1ull << 30)), 2u);
  // Evictions in flight are counted by another mix of the key.
  EXPECT_FALSE(c.eviction_pending(cache_ref::key(1, 0)));
  in_flight[0x740D] = 1;
  EXPECT_TRUE(c.eviction_pending(cache_ref::key(1, 0)));
  EXPECT_FALSE(c.eviction_pending(cache_ref::key(2, 99)));
  in_flight[0x811D] = 1;
  EXPECT_TRUE(c.eviction_pending(cache_ref::key(2, 99)));
}

}  // namespace
