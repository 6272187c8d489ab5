// Asynchronous batches on the CPU target (array_ref::prefetch / wait /
// release, post_write_back): std::thread lanes post reads, do other work,
// wait, then read what they prefetched, against the real host controller
// (both deliveries) and the memory controller; failures injected in the host
// controller surface at the wait with index, LBA and status.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "controller/fault_policy.h"
#include "controller/host_controller.h"
#include "test_files.h"
#include "warpstore/array.cuh"
#include "write_cases.h"

using namespace warpstore;

namespace {

using setup = test::write_case;

options batch_options(const setup& s) {
  // 256 lines of 4 KiB, 1/8 of the 8 MiB file.
  options o = test::small_cache_options(1 << 20, s.kind);
  o.deliver = s.deliver;
  o.ways = 8;
  o.queue_depth = 16;
  return o;
}

constexpr std::uint64_t per_line = 4096 / 8;

std::uint64_t want(std::uint64_t i) { return tools::pattern_word(i * 8); }

class ArrayBatch : public test::pattern_file_suite<setup> {};

INSTANTIATE_TEST_SUITE_P(Controllers, ArrayBatch, test::write_cases(), test::write_case_name);

}  // namespace

// Post, wait, then every element of the span is a hit and right.
TEST_P(ArrayBatch, PrefetchWaitThenReadsHit) {
  array<std::uint64_t> a(file_.path(), 0, batch_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  const std::uint64_t first = 3 * per_line + 17, n = 5 * per_line;  // 6 lines, partial ends
  batch_ticket t = ref.prefetch(first, n, true);
  EXPECT_EQ(t.lines(), 6u);
  EXPECT_TRUE(ref.wait(t));
  const cache_stats before = a.stats();
  EXPECT_EQ(before.misses, 6u);
  std::uint64_t wrong = 0;
  for (std::uint64_t i = first; i < first + n; ++i) wrong += ref[i] != want(i);
  EXPECT_EQ(wrong, 0u);
  const cache_stats after = a.stats();
  EXPECT_EQ(after.misses, before.misses);  // every read hit
  EXPECT_EQ(after.hits - before.hits, n);
  for (std::uint64_t i = first; i < first + n; i += 41) {  // pinned: addressable without atomics
    const std::uint64_t* p = ref.pinned_element(i);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(*p, want(i));
  }
  ref.release(t);
  ref.release(t);  // a second release gives back nothing
  a.check();
  // Nothing stays pinned: the whole cache can be recycled.
  std::uint64_t wrong2 = 0;
  for (std::uint64_t i = 0; i < a.size(); i += per_line / 2) wrong2 += ref[i] != want(i);
  EXPECT_EQ(wrong2, 0u);
  a.check();
}

// A span of many parts (a CPU thread has batch_ticket::rounds lines in flight
// at most): the earlier parts complete inside prefetch, the last at wait.
TEST_P(ArrayBatch, SpanOfManyLines) {
  options o = batch_options(GetParam());
  o.cache_bytes = 4 << 20;  // 1024 lines: pinned lines leave every set a victim
  o.ways = 16;
  array<std::uint64_t> a(file_.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  const std::uint64_t first = 100, n = 150 * per_line;  // 151 lines
  for (bool pin : {false, true}) {
    batch_ticket t = ref.prefetch(first, n, pin);
    ASSERT_EQ(t.lines(), 151u);
    EXPECT_TRUE(ref.wait(t));
    const std::uint64_t misses = a.stats().misses;
    std::vector<std::uint64_t> out(n);
    EXPECT_TRUE(ref.read_span(first, n, out.data()));
    std::uint64_t wrong = 0;
    for (std::uint64_t k = 0; k < n; ++k) wrong += out[k] != want(first + k);
    EXPECT_EQ(wrong, 0u);
    if (pin) {
      EXPECT_EQ(a.stats().misses, misses);  // pinned: every line still there
    }
    ref.release(t);
    a.check();
    a.cache().clear();
  }
}

// Present lines are not read again; a second prefetch of the same span is all hits.
TEST_P(ArrayBatch, PresentLinesAreNotReadAgain) {
  array<std::uint64_t> a(file_.path(), 0, batch_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  batch_ticket t = ref.prefetch(0, 4 * per_line);
  EXPECT_TRUE(ref.wait(t));
  const cache_stats s1 = a.stats();
  batch_ticket u = ref.prefetch(2 * per_line, 4 * per_line);  // lines 2..5: two present
  EXPECT_TRUE(ref.wait(u));
  const cache_stats s2 = a.stats();
  EXPECT_EQ(s2.misses - s1.misses, 2u);
  EXPECT_EQ(s2.hits - s1.hits, 2u);
  EXPECT_EQ(s2.bytes_read - s1.bytes_read, 2u * 4096u);
  EXPECT_TRUE(ref.wait(u));  // waiting again is a no-op
  a.check();
}

// Every post records the lanes that made it, and wait/release work over
// those lanes rather than over whichever lanes are converged when they are
// called (on the GPU a kernel's lanes reach wait or release in groups after
// a per-lane loop; recomputing the mask there made lanes disagree on the
// part geometry and run different collectives: misaligned writes on the
// H100). A CPU "warp" is one thread, so the mask is always 1 and a
// lane-group mismatch cannot happen here; what the CPU build can check is
// that no post path forgets the mask (a ticket with none falls back to the
// calling lanes) and that a never-posted ticket is harmless.
TEST_P(ArrayBatch, TicketRemembersItsLanes) {
  array<std::uint64_t> a(file_.path(), 10000, batch_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  const unsigned lanes = detail::warp::active_mask();
  batch_ticket never;  // never posted: nothing to wait for, nothing to release
  EXPECT_EQ(never.mask, 0u);
  EXPECT_TRUE(ref.wait(never));
  ref.release(never);
  batch_ticket t = ref.prefetch(100, 3 * per_line, true);
  EXPECT_EQ(t.mask, lanes);
  EXPECT_TRUE(ref.wait(t));
  EXPECT_EQ(t.mask, lanes);
  ref.release(t);
  batch_ticket empty = ref.prefetch(5, 0);
  EXPECT_EQ(empty.mask, lanes);
  EXPECT_TRUE(ref.wait(empty));
  batch_ticket bad = ref.prefetch(9990, 20, true);
  EXPECT_EQ(bad.mask, lanes);
  EXPECT_FALSE(ref.wait(bad));
  ref.release(bad);
  EXPECT_THROW(a.check(), index_error);
  batch_ticket ro = ref.post_write_back(0, per_line);  // a read-only open
  EXPECT_EQ(ro.mask, lanes);
  EXPECT_FALSE(ref.wait(ro));
  EXPECT_ANY_THROW(a.check());
}

// An out-of-range span is recorded at the post and reported by the wait.
TEST_P(ArrayBatch, OutOfRangeSurfacesAtWait) {
  array<std::uint64_t> a(file_.path(), 10000, batch_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  batch_ticket t = ref.prefetch(9990, 20, true);
  EXPECT_FALSE(ref.wait(t));
  ref.release(t);  // holds nothing
  try {
    a.check();
    ADD_FAILURE() << "no error raised";
  } catch (const index_error& e) {
    EXPECT_EQ(e.index(), 10009u);
  }
  batch_ticket ok = ref.prefetch(9990, 10, true);
  EXPECT_TRUE(ref.wait(ok));
  EXPECT_EQ(ref[9999], want(9999));
  ref.release(ok);
  a.check();
}

// Threads prefetch overlapping spans at once (some pinned, some not), do
// "work", wait and check every element; the cache is far smaller than the
// file, so lines are evicted and refilled all along.
TEST_P(ArrayBatch, ConcurrentOverlappingPrefetches) {
  options o = batch_options(GetParam());
  o.cache_bytes = 4 << 20;  // half the file; pins spread thin over 64 sets
  o.ways = 16;
  array<std::uint64_t> a(file_.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  std::atomic<std::uint64_t> wrong{0}, failed{0};
  const unsigned lanes = 8;
  test::run_lanes(lanes, [&](unsigned lane) {
    test::lane_rng rng{lane * 104729u + 3};
    std::vector<std::uint64_t> out(12 * per_line);
    for (int iter = 0; iter < 150; ++iter) {
      // Half the spans over the first 96 lines, so threads overlap heavily,
      // half over the whole file, so lines are evicted.
      const std::uint64_t n = 1 + rng.next() % (12 * per_line);
      const std::uint64_t range = iter % 2 == 0 ? 96 * per_line : a.size();
      const std::uint64_t first = rng.next() % (range - n);
      const bool pin = (rng.next() & 1) != 0;
      batch_ticket t = ref.prefetch(first, n, pin);
      volatile std::uint64_t work = 0;
      for (int k = 0; k < 200; ++k) work = work + static_cast<std::uint64_t>(k);
      if (!ref.wait(t)) failed.fetch_add(1);
      if (!ref.read_span(first, n, out.data())) failed.fetch_add(1);
      for (std::uint64_t k = 0; k < n; ++k) wrong.fetch_add(out[k] != want(first + k));
      ref.release(t);
    }
  });
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(failed.load(), 0u);
  a.check();
  EXPECT_EQ(a.stats().errors, 0u);
  EXPECT_GT(a.stats().evictions, 0u);
}

// The pattern of bench/async_kernel_bench.cu's async kernel, at CPU scale:
// "blocks" of loader threads (a CPU thread is a warp) walk tiles of rows
// (one cache line a row), each loader double-buffering pinned batches of
// its rows of the block's tiles: wait for this tile, take the addresses,
// post the next tile, barrier, compute, barrier, release this tile. Short
// deadline (5 s, roomy under ThreadSanitizer on 2 cores): a wait that only
// ends at the deadline fails the test instead of stalling the suite.
struct tile_walk {
  unsigned blocks;
  unsigned loaders;        // threads of a block, coupled by its barriers
  std::uint64_t rows;      // rows (lines) of a loader's batch
  std::size_t cache_bytes;
  std::uint32_t ways;
  std::uint32_t queue_pairs;
  std::uint32_t queue_depth;
};

void walk_tiles(const std::string& path, options o, const tile_walk& w) {
  o.cache_bytes = w.cache_bytes;
  o.ways = w.ways;
  o.queue_pairs = w.queue_pairs;
  o.queue_depth = w.queue_depth;
  o.timeout_ns = 5'000'000'000ull;
  array<std::uint64_t> a(path, 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  const std::uint64_t tile_rows = w.loaders * w.rows;
  const std::uint64_t tiles = a.size() / per_line / tile_rows;
  std::atomic<std::uint64_t> wrong{0}, failed{0}, missing{0}, done{0};
  std::vector<std::unique_ptr<std::barrier<>>> bars;
  std::vector<std::vector<const std::uint64_t*>> shared(w.blocks);
  for (unsigned b = 0; b < w.blocks; ++b) {
    bars.push_back(std::make_unique<std::barrier<>>(w.loaders));
    shared[b].assign(tile_rows, nullptr);
  }
  const auto t0 = std::chrono::steady_clock::now();
  test::run_lanes(w.blocks * w.loaders, [&](unsigned id) {
    const unsigned block = id / w.loaders, loader = id % w.loaders;
    std::barrier<>& bar = *bars[block];
    std::vector<const std::uint64_t*>& rows = shared[block];
    auto span_of = [&](std::uint64_t tile) {
      return (tile * tile_rows + loader * w.rows) * per_line;
    };
    std::uint64_t t = block;
    batch_ticket cur;
    if (t < tiles) cur = ref.prefetch(span_of(t), w.rows * per_line, true);
    for (; t < tiles; t += w.blocks) {
      const std::uint64_t next = t + w.blocks;
      batch_ticket ahead;
      const bool ok = ref.wait(cur);
      if (!ok) failed.fetch_add(1);
      for (std::uint64_t r = 0; r < w.rows; ++r) {
        const std::uint64_t row = t * tile_rows + loader * w.rows + r;
        const std::uint64_t* p = ok ? ref.pinned_element(row * per_line) : nullptr;
        if (ok && p == nullptr) missing.fetch_add(1);
        rows[loader * w.rows + r] = p;
      }
      if (next < tiles) ahead = ref.prefetch(span_of(next), w.rows * per_line, true);
      bar.arrive_and_wait();
      // "Compute": every loader reads a few words of every row of the tile.
      for (std::uint64_t r = loader; r < tile_rows; r += w.loaders) {
        const std::uint64_t* p = rows[r];
        if (p == nullptr) continue;
        const std::uint64_t e = (t * tile_rows + r) * per_line;
        for (std::uint64_t k = 0; k < per_line; k += 97) wrong.fetch_add(p[k] != want(e + k));
      }
      bar.arrive_and_wait();
      ref.release(cur);
      cur = ahead;
      done.fetch_add(1);
    }
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(missing.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(done.load(), tiles * w.loaders);
  EXPECT_LT(s, 5.0) << "a wait that only ended at a deadline";
  EXPECT_NO_THROW(a.check());
  // Every pin went back: the whole cache can be recycled.
  std::uint64_t wrong2 = 0;
  for (std::uint64_t i = 0; i < a.size(); i += per_line) wrong2 += ref[i] != want(i);
  EXPECT_EQ(wrong2, 0u);
  EXPECT_NO_THROW(a.check());
}

// One loader per block (the rule: a block's loaders are coupled by its
// barriers, so together they may hold one window at a time). Two loaders
// per block, each holding its posted window across the barrier while the
// other posts, deadlocked here on one pair of depth 256 and on 2 pairs of
// depth 32 (every run ended at the deadline): tickets wrap onto a slot of
// the parked loader's window, the claimer blocks holding an unposted ticket,
// the tail stops there, and the block-mate's commands behind it never
// complete.
TEST_P(ArrayBatch, DoubleBufferedTilesLargeCache) {
  walk_tiles(file_.path(), batch_options(GetParam()),
             {16, 1, 32, std::size_t{16} << 20, 16, 2, 256});
}

// Cache only a few times the pins held; lines are evicted all along. At most
// 4 blocks x 2 windows x 16 lines = 128 lines are pinned, a quarter of the
// 512-line cache (itself a quarter of the file). Sized so on purpose: with
// 8 blocks of 32-line windows the pins could reach all 512 lines, a hashed
// set then had no victim left for the next window, and every loader waited
// for a way that only another parked loader could free, until the deadline
// (CI, ThreadSanitizer run, 2026-11-25). The pin budget is the user's to keep.
TEST_P(ArrayBatch, DoubleBufferedTilesSmallCache) {
  walk_tiles(file_.path(), batch_options(GetParam()),
             {4, 1, 16, std::size_t{2} << 20, 32, 2, 256});
}

// Many loaders on one shallow pair: tickets wrap around the ring all along.
TEST_P(ArrayBatch, DoubleBufferedTilesOneShallowPair) {
  walk_tiles(file_.path(), batch_options(GetParam()),
             {16, 1, 32, std::size_t{16} << 20, 16, 1, 32});
}

// Batches against plain reads of the same lines from other threads.
TEST_P(ArrayBatch, BatchesBesideOrdinaryReaders) {
  options o = batch_options(GetParam());
  o.cache_bytes = 512 << 10;  // 128 lines: constant eviction
  array<std::uint64_t> a(file_.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  std::atomic<std::uint64_t> wrong{0}, failed{0};
  test::run_lanes(6, [&](unsigned lane) {
    test::lane_rng rng{lane * 31u + 7};
    for (int iter = 0; iter < 300; ++iter) {
      const std::uint64_t n = 1 + rng.next() % (4 * per_line);
      const std::uint64_t first = rng.next() % (a.size() / 8 - n);
      if (lane % 2 == 0) {
        batch_ticket t = ref.prefetch(first, n, true);
        if (!ref.wait(t)) failed.fetch_add(1);
        for (std::uint64_t i = first; i < first + n; i += 61) wrong.fetch_add(ref[i] != want(i));
        ref.release(t);
      } else {
        for (std::uint64_t i = first; i < first + n; i += 61) wrong.fetch_add(ref[i] != want(i));
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(failed.load(), 0u);
  a.check();
}

// Write-back posted without waiting, completed at the wait: the file holds
// the new bytes before any flush, and the lines are clean.
TEST_P(ArrayBatch, PostedWriteBack) {
  options o = batch_options(GetParam());
  o.writable = true;
  o.eager_write_back = false;
  array<std::uint64_t> a(file_.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  const std::uint64_t first = 5 * per_line, n = 20 * per_line;
  for (std::uint64_t i = first; i < first + n; ++i) ref.store(i, ~want(i));
  const std::uint64_t wb = a.stats().writebacks;
  batch_ticket t = ref.post_write_back(first, n);
  EXPECT_TRUE(ref.wait(t));
  EXPECT_EQ(a.stats().writebacks - wb, 20u);
  if (GetParam().kind == controller_kind::host) {
    std::vector<std::uint64_t> buf(n);
    const int fd = ::open(file_.path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, buf.data(), n * 8, static_cast<off_t>(first * 8)),
              static_cast<ssize_t>(n * 8));
    ::close(fd);
    std::uint64_t wrong = 0;
    for (std::uint64_t k = 0; k < n; ++k) wrong += buf[k] != ~want(first + k);
    EXPECT_EQ(wrong, 0u);
  }
  // Clean now: a second post writes nothing.
  batch_ticket u = ref.post_write_back(first, n);
  EXPECT_TRUE(ref.wait(u));
  EXPECT_EQ(a.stats().writebacks - wb, 20u);
  a.flush();
  for (std::uint64_t i = first; i < first + n; i += 97) EXPECT_EQ(ref[i], ~want(i));
}

TEST_P(ArrayBatch, WriteBackOnReadOnlyArrayFails) {
  array<std::uint64_t> a(file_.path(), 0, batch_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  batch_ticket t = ref.post_write_back(0, 10);
  EXPECT_FALSE(ref.wait(t));
  EXPECT_THROW(a.check(), io_error);
}

namespace {

// An array over the host controller with faults injected.
struct faulty_array {
  std::shared_ptr<planned_faults> faults;
  std::unique_ptr<array<std::uint64_t>> a;
  faulty_array(const std::string& path, const options& o, fault_plan plan)
      : faults(std::make_shared<planned_faults>(std::move(plan))) {
    auto file = std::make_shared<backing_file>(path, direct_io::off);
    auto ctl = std::make_shared<host_controller>(file, o, o.line_size, faults);
    a = std::make_unique<array<std::uint64_t>>(std::make_shared<warpstore::cache>(o), ctl, 0, 0,
                                               o);
  }
};

}  // namespace

// A READ failing with a media error: recorded with index, LBA and status,
// the wait says false, its line is not cached, the others are.
TEST(ArrayBatchFaults, ReadErrorSurfacesAtWait) {
  test::pattern_file file(8 << 20);
  const options o = batch_options({controller_kind::host, delivery::gpu_pull});
  const std::uint64_t bad_line = 13;
  fault_plan plan;
  plan.kind = fault_kind::io_error;
  plan.lbas = {bad_line * 8 + 3};  // a block inside line 13
  faulty_array f(file.path(), o, plan);
  const array_ref<std::uint64_t> ref = f.a->ref();
  for (bool pin : {true, false}) {
    batch_ticket t = ref.prefetch(10 * per_line + 5, 6 * per_line, pin);  // lines 10..16
    EXPECT_FALSE(ref.wait(t));
    EXPECT_TRUE(t.has_failed());
    ref.release(t);
    try {
      f.a->check();
      ADD_FAILURE() << "no error raised";
    } catch (const index_error&) {
      ADD_FAILURE() << "an index error";
    } catch (const io_error& e) {
      EXPECT_EQ(e.kind(), error_kind::io);
      EXPECT_EQ(e.lba(), bad_line * 8);
      EXPECT_EQ(e.index(), bad_line * per_line);
      EXPECT_FALSE(e.status().success());
    }
  }
  // The other lines are fine; the failed one fails again, the ordinary way.
  batch_ticket ok = ref.prefetch(14 * per_line, 2 * per_line, true);
  EXPECT_TRUE(ref.wait(ok));
  EXPECT_EQ(ref[14 * per_line + 1], want(14 * per_line + 1));
  ref.release(ok);
  f.a->check();
  EXPECT_EQ(ref[bad_line * per_line], 0u);
  EXPECT_THROW(f.a->check(), io_error);
  // No pin leaked: the whole cache is usable.
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 0; i < 512 * per_line; i += per_line)
    if (i / per_line != bad_line) wrong += ref[i] != want(i);
  EXPECT_EQ(wrong, 0u);
}

// A command that never completes: the wait ends at the deadline, with a
// deadline error, and does not hang.
TEST(ArrayBatchFaults, StalledReadEndsAtTheDeadline) {
  test::pattern_file file(8 << 20);
  options o = batch_options({controller_kind::host, delivery::gpu_pull});
  o.timeout_ns = 300'000'000ull;
  fault_plan plan;
  plan.kind = fault_kind::stall;
  plan.lbas = {40 * 8};
  faulty_array f(file.path(), o, plan);
  const array_ref<std::uint64_t> ref = f.a->ref();
  const auto t0 = std::chrono::steady_clock::now();
  batch_ticket t = ref.prefetch(38 * per_line, 4 * per_line, true);
  EXPECT_FALSE(ref.wait(t));
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  try {
    f.a->check();
    ADD_FAILURE() << "no error raised";
  } catch (const io_error& e) {
    EXPECT_EQ(e.kind(), error_kind::deadline);
    EXPECT_EQ(e.lba(), 40u * 8u);
  }
}

// Faults at random over many concurrent batches: every failure is reported,
// every line that was not reported is right.
TEST(ArrayBatchFaults, RandomErrorsUnderConcurrency) {
  test::pattern_file file(8 << 20);
  options o = batch_options({controller_kind::host, delivery::gpu_pull});
  fault_plan plan;
  plan.kind = fault_kind::io_error;
  plan.probability = 0.02;
  plan.seed = 5;
  faulty_array f(file.path(), o, plan);
  const array_ref<std::uint64_t> ref = f.a->ref();
  std::atomic<std::uint64_t> wrong{0}, failed_waits{0};
  test::run_lanes(6, [&](unsigned lane) {
    test::lane_rng rng{lane + 101u};
    std::vector<std::uint64_t> out(8 * per_line);
    for (int iter = 0; iter < 100; ++iter) {
      const std::uint64_t n = 1 + rng.next() % (8 * per_line);
      const std::uint64_t first = rng.next() % (f.a->size() - n);
      batch_ticket t = ref.prefetch(first, n, true);
      if (!ref.wait(t)) {
        failed_waits.fetch_add(1);
        continue;  // holds no pins
      }
      // Pinned: read_span only hits, so it cannot fail.
      if (!ref.read_span(first, n, out.data())) wrong.fetch_add(1);
      for (std::uint64_t k = 0; k < n; ++k) wrong.fetch_add(out[k] != want(first + k));
      ref.release(t);
    }
  });
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(f.faults->injected(), 0u);
  EXPECT_GT(failed_waits.load(), 0u);
  EXPECT_THROW(f.a->check(), io_error);
}
