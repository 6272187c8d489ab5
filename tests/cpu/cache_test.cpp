// The cache protocol on its own: hits, fills, pins, clock replacement, and
// many threads racing on a cache far smaller than the keys they use.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "test_files.h"
#include "warpstore/cache.cuh"

using namespace warpstore;

namespace {

// Keys of `source` whose lines land in set `set`.
std::vector<std::uint64_t> keys_in_set(const cache_ref& c, std::uint32_t set, std::size_t n) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t line = 0; out.size() < n; ++line) {
    const std::uint64_t k = cache_ref::key(1, line);
    if (c.set_of(k) == set) out.push_back(k);
  }
  return out;
}

std::uint32_t pins_of(const cache_ref& c, std::uint32_t slot) {
  return c.states[slot] & line_state::pins;
}

}  // namespace

TEST(Cache, GeometryIsWholeSets) {
  cache c(1 << 20, 4096, 16);
  EXPECT_EQ(c.num_lines(), 256u);
  EXPECT_EQ(c.ref().num_sets, 16u);
  // 3 MiB is 48 sets of 64 KiB: all of them are used, not a power of two's 32.
  cache odd(3 << 20, 4096, 16);
  EXPECT_EQ(odd.ref().num_sets, 48u);
  EXPECT_EQ(odd.bytes(), std::size_t{3} << 20);
  // Part of a set is dropped.
  cache part((3 << 20) + 4096, 4096, 16);
  EXPECT_EQ(part.bytes(), std::size_t{3} << 20);
  EXPECT_THROW(cache(1 << 20, 1000, 16), std::invalid_argument);
  EXPECT_THROW(cache(1 << 20, 4096, 0), std::invalid_argument);
  EXPECT_THROW(cache(4096, 4096, 16), std::invalid_argument);
}

TEST(Cache, KeysSpreadOverEverySetOfAnOddCount) {
  cache c(48 * 4 * 512, 512, 4);  // 48 sets
  const cache_ref& r = c.ref();
  ASSERT_EQ(r.num_sets, 48u);
  std::vector<std::uint32_t> per_set(r.num_sets);
  const std::uint32_t keys = 48 * 1000;
  for (std::uint64_t line = 0; line < keys; ++line) {
    const std::uint32_t s = r.set_of(cache_ref::key(1, line));
    ASSERT_LT(s, r.num_sets);
    ++per_set[s];
  }
  for (std::uint32_t s = 0; s < r.num_sets; ++s) {
    EXPECT_GT(per_set[s], 850u) << "set " << s;
    EXPECT_LT(per_set[s], 1150u) << "set " << s;
  }
}

TEST(Cache, MissFillsThenHits) {
  cache c(64 << 10, 4096, 4);
  const cache_ref& r = c.ref();
  const std::uint64_t k = cache_ref::key(1, 42);
  acquire_result a = r.acquire(k, 3);
  ASSERT_EQ(a.kind, acquire_kind::fill);
  EXPECT_EQ(pins_of(r, a.slot), 3u);
  // Busy while filling: others are told to retry and hold nothing.
  EXPECT_EQ(r.acquire(k, 1).kind, acquire_kind::retry);
  EXPECT_EQ(pins_of(r, a.slot), 3u);
  std::memset(r.line_data(a.slot), 0xAB, 4096);
  r.publish(a.slot, 4096);
  const acquire_result b = r.acquire(k, 1);
  ASSERT_EQ(b.kind, acquire_kind::hit);
  EXPECT_EQ(b.slot, a.slot);
  EXPECT_EQ(pins_of(r, a.slot), 4u);
  r.release(a.slot, 4);
  EXPECT_EQ(pins_of(r, a.slot), 0u);
  const cache_stats s = c.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.bytes_read, 4096u);
}

TEST(Cache, PinnedLinesAreNeverVictims) {
  cache c(64 << 10, 4096, 4);  // 16 lines, 4 sets of 4
  const cache_ref& r = c.ref();
  const auto keys = keys_in_set(r, 0, 6);
  std::vector<std::uint32_t> slots;
  for (int i = 0; i < 4; ++i) {
    const acquire_result a = r.acquire(keys[i], 1);
    ASSERT_EQ(a.kind, acquire_kind::fill);
    r.publish(a.slot, 4096);
    slots.push_back(a.slot);
  }
  // All four ways pinned: a fifth key cannot get a line.
  EXPECT_EQ(r.acquire(keys[4], 1).kind, acquire_kind::retry);
  r.release(slots[2], 1);
  const acquire_result e = r.acquire(keys[4], 1);
  ASSERT_EQ(e.kind, acquire_kind::fill);
  EXPECT_EQ(e.slot, slots[2]);
  EXPECT_EQ(c.stats().evictions, 1u);
  // The evicted key is gone; the others still hit.
  r.publish(e.slot, 4096);
  EXPECT_EQ(r.acquire(keys[0], 1).kind, acquire_kind::hit);
}

// A caller waiting long with priority (begin_urgent) gets the set's next
// victim: newcomers to that set still hit, but take no victim there until
// it is served (end_urgent). Other sets are not held back.
TEST(Cache, VictimsGoToUrgentWaitersFirst) {
  cache c(64 << 10, 4096, 4);  // 16 lines, 4 sets of 4
  const cache_ref& r = c.ref();
  const auto keys = keys_in_set(r, 2, 6);
  for (int i = 0; i < 4; ++i) {
    const acquire_result a = r.acquire(keys[i], 1);
    ASSERT_EQ(a.kind, acquire_kind::fill);
    r.publish(a.slot, 4096);
    r.release(a.slot, 1);
  }
  r.begin_urgent(2);
  EXPECT_EQ(r.acquire(keys[4], 1).kind, acquire_kind::retry) << "a newcomer took the victim";
  const acquire_result h = r.acquire(keys[0], 1);
  ASSERT_EQ(h.kind, acquire_kind::hit) << "a newcomer's hit was held back";
  r.release(h.slot, 1);
  const auto elsewhere = keys_in_set(r, 3, 1);
  const acquire_result o = r.acquire(elsewhere[0], 1);
  EXPECT_EQ(o.kind, acquire_kind::fill) << "another set was held back";
  const acquire_result u = r.acquire(keys[4], 1, /*urgent=*/true);
  ASSERT_EQ(u.kind, acquire_kind::fill);
  r.publish(u.slot, 4096);
  r.release(u.slot, 1);
  r.end_urgent(2);
  EXPECT_EQ(r.acquire(keys[5], 1).kind, acquire_kind::fill);
}

TEST(Cache, ClockGivesReferencedLinesASecondChance) {
  cache c(64 << 10, 4096, 4);
  const cache_ref& r = c.ref();
  const auto keys = keys_in_set(r, 1, 5);
  std::vector<std::uint32_t> slots;
  for (int i = 0; i < 4; ++i) {
    const acquire_result a = r.acquire(keys[i], 1);
    r.publish(a.slot, 4096);
    r.release(a.slot, 1);
    slots.push_back(a.slot);
  }
  // Touch every line but keys[1]: it is the one without a reference bit.
  for (int i : {0, 2, 3}) {
    const acquire_result h = r.acquire(keys[i], 1);
    ASSERT_EQ(h.kind, acquire_kind::hit);
    r.release(h.slot, 1);
  }
  // Fills never set the reference bit; clear it on the untouched line to be explicit.
  r.states[slots[1]] &= ~line_state::referenced;
  const acquire_result v = r.acquire(keys[4], 1);
  ASSERT_EQ(v.kind, acquire_kind::fill);
  EXPECT_EQ(v.slot, slots[1]);
}

TEST(Cache, ClearDropsEverySetWordAndEvictionCount) {
  // Every word clear() owns is zeroed: the sets' locks, hands and priority
  // counts, and all of the eviction counters (the last ones were left as
  // they were while clear() counted the set words as two arrays, not three).
  cache c(1 << 20, 4096, 16);
  const cache_ref& r = c.ref();
  const auto keys = keys_in_set(r, 3, 2);
  const acquire_result a = r.acquire(keys[0], 1);
  ASSERT_EQ(a.kind, acquire_kind::fill);
  r.publish(a.slot, 4096);
  r.release(a.slot, 1);
  r.begin_urgent(3);
  r.set_locks[5] = 1;
  for (std::uint32_t w = 0; w <= r.eviction_mask; ++w) r.evictions_in_flight[w] = 1;
  c.clear();
  for (std::uint32_t s = 0; s < r.num_sets; ++s) {
    EXPECT_EQ(r.set_locks[s], 0u) << s;
    EXPECT_EQ(r.set_hands[s], 0u) << s;
    EXPECT_EQ(r.set_urgent[s], 0u) << s;
  }
  for (std::uint32_t w = 0; w <= r.eviction_mask; ++w)
    EXPECT_EQ(r.evictions_in_flight[w], 0u) << w;
  EXPECT_FALSE(r.eviction_pending(keys[0]));
  // The set takes a newcomer's fill again, and the cleared line is gone.
  EXPECT_EQ(r.acquire(keys[1], 1).kind, acquire_kind::fill);
  EXPECT_EQ(r.acquire(keys[0], 1).kind, acquire_kind::fill);
}

TEST(Cache, ConcurrentLanesNeverSeeAnotherKeysBytes) {
  cache c(128 << 10, 4096, 4);  // 32 lines for 512 keys
  const cache_ref& r = c.ref();
  std::atomic<std::uint64_t> wrong{0}, served{0};
  test::run_lanes(16, [&](unsigned lane) {
    test::lane_rng rng{lane + 1};
    for (int it = 0; it < 20000; ++it) {
      const std::uint64_t line = rng.next() % 512;
      const std::uint64_t k = cache_ref::key(3, line);
      for (int attempt = 0;; ++attempt) {
        const acquire_result a = r.acquire(k, 1);
        if (a.kind == acquire_kind::retry) {
          ASSERT_LT(attempt, 10'000'000);
          std::this_thread::yield();
          continue;
        }
        auto* words = reinterpret_cast<std::uint64_t*>(r.line_data(a.slot));
        if (a.kind == acquire_kind::fill) {
          for (int w = 0; w < 512; ++w) words[w] = k * 1000 + w;
          r.publish(a.slot, 4096);
        }
        for (int w = 0; w < 512; w += 61)
          if (words[w] != k * 1000 + w) wrong.fetch_add(1);
        r.release(a.slot, 1);
        served.fetch_add(1);
        break;
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(served.load(), 16u * 20000u);
  const cache_stats s = c.stats();
  EXPECT_EQ(s.hits + s.misses, 16u * 20000u);
  EXPECT_GT(s.evictions, 0u);
  for (std::uint32_t i = 0; i < c.num_lines(); ++i) EXPECT_EQ(pins_of(r, i), 0u);
}
