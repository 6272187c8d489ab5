// The whole write path on the CPU target: std::thread lanes store into arrays
// whose cache is far smaller than the file, so lines are written back on
// eviction; flush() must leave every byte in the file. Against the real host
// controller (both deliveries) and the memory controller.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "test_files.h"
#include "write_cases.h"
#include "warpstore/array.cuh"

using namespace warpstore;

namespace {

constexpr std::uint64_t new_seed = 11;

using setup = test::write_case;

options write_options(const setup& s, std::uint32_t line_size = 4096) {
  options o = test::small_cache_options(256 << 10, s.kind);  // 1/32 of the 8 MiB file
  o.deliver = s.deliver;
  o.writable = true;
  o.line_size = line_size;
  return o;
}

std::uint64_t new_word(std::uint64_t i) {
  return tools::pattern_word(i * 8, new_seed);
}

using test::file_mismatches;

// Words of the file that differ from: word `at` of each of lines
// [0, lines) (of `per_line` words) new, every other word the original.
std::uint64_t lines_written_mismatches(const std::string& path, std::uint64_t words,
                                       std::uint64_t per_line, std::uint64_t at,
                                       std::uint64_t lines) {
  return file_mismatches(path, words, [&](std::uint64_t i) {
    return i % per_line == at && i / per_line < lines ? new_word(i) : tools::pattern_word(i * 8);
  });
}

class ArrayWrite : public test::pattern_file_suite<setup> {};

}  // namespace

TEST_P(ArrayWrite, StoreEveryElementThroughASmallCacheThenFlush) {
  array<std::uint64_t> a(file_.path(), 0, write_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  const unsigned lanes = 8;
  test::run_lanes(lanes, [&](unsigned lane) {
    // Interleaved lines: lanes meet on the same sets and lines.
    for (std::uint64_t i = lane * 64; i < ref.size(); i += lanes * 64)
      for (std::uint64_t k = i; k < i + 64 && k < ref.size(); ++k) ref.store(k, new_word(k));
  });
  a.check();
  EXPECT_GT(a.stats().writebacks, 0u);  // the cache holds 1/32: most lines left on eviction
  a.flush();
  EXPECT_EQ(file_mismatches(file_.path(), ref.size(), new_word), 0u);
}

TEST_P(ArrayWrite, PartialStoresKeepTheRestOfTheLine) {
  array<std::uint64_t> a(file_.path(), 0, write_options(GetParam(), 512));
  const array_ref<std::uint64_t> ref = a.ref();
  test::run_lanes(6, [&](unsigned lane) {
    test::lane_rng rng{lane + 1};
    for (int n = 0; n < 3000; ++n) {
      // Every third word at most, each lane its own words (no two lanes
      // write one word), lanes sharing lines.
      const std::uint64_t i = ((rng.next() % (ref.size() / 18)) * 6 + lane) * 3;
      ref.store(i, new_word(i));
    }
  });
  a.flush();
  // Words not a multiple of 3 were never written: read-modify-write kept them.
  std::vector<std::uint64_t> buf(ref.size());
  const int fd = ::open(file_.path().c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, buf.data(), buf.size() * 8, 0), static_cast<ssize_t>(buf.size() * 8));
  ::close(fd);
  std::uint64_t bad = 0, written = 0;
  for (std::uint64_t i = 0; i < buf.size(); ++i) {
    if (i % 3 != 0) {
      bad += buf[i] != tools::pattern_word(i * 8);
    } else {
      written += buf[i] == new_word(i);
      bad += buf[i] != new_word(i) && buf[i] != tools::pattern_word(i * 8);
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(written, 1000u);
}

TEST_P(ArrayWrite, ReadsSeeStoresBeforeAndAfterEviction) {
  array<std::uint64_t> a(file_.path(), 0, write_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  std::atomic<std::uint64_t> wrong{0};
  test::run_lanes(8, [&](unsigned lane) {
    const std::uint64_t per = ref.size() / 8;
    for (std::uint64_t i = lane * per; i < (lane + 1) * per; ++i) {
      ref.store(i, new_word(i));
      if (ref[i] != new_word(i)) wrong.fetch_add(1);  // hit: the line just written
    }
    // Evicted long ago: read back from the file the write-back reached.
    for (std::uint64_t i = lane * per; i < (lane + 1) * per; i += 97)
      if (ref[i] != new_word(i)) wrong.fetch_add(1);
  });
  EXPECT_EQ(wrong.load(), 0u);
  a.flush();
}

// A warp that must evict a dirty line of its array takes the slot and sends
// the old bytes and its own line's READ in one trip (overlapped eviction);
// readers of the evicted line wait until its WRITE completed, so nobody
// reads the file's stale bytes. Off, the warp writes back and looks again.
TEST_P(ArrayWrite, OverlappedEvictionLosesNothingAndReadersSeeTheEvictedBytes) {
  for (const bool overlapped : {true, false}) {
    test::pattern_file f{8 << 20};
    options o = write_options(GetParam());
    o.eager_write_back = false;  // every line stays dirty until evicted
    o.overlapped_eviction = overlapped;
    array<std::uint64_t> a(f.path(), 0, o);
    const array_ref<std::uint64_t> ref = a.ref();
    const std::uint64_t per_line = 4096 / 8;
    const std::uint64_t lines = ref.size() / per_line;
    std::atomic<std::uint64_t> wrong{0};
    test::run_lanes(8, [&](unsigned lane) {
      test::lane_rng rng{lane + 7};
      // Each lane owns lines lane, lane + 8, ...: it writes one word of each
      // and at once reads back a word of a random earlier line of its own,
      // most of which the small cache evicted dirty (or is evicting now).
      for (std::uint64_t l = lane, n = 0; l < lines; l += 8, ++n) {
        const std::uint64_t i = l * per_line + l % per_line;
        ref.store(i, new_word(i));
        const std::uint64_t back = lane + 8 * (rng.next() % (n + 1));
        const std::uint64_t j = back * per_line + back % per_line;
        if (ref[j] != new_word(j)) wrong.fetch_add(1);
        const std::uint64_t kept =
            back * per_line + (back + per_line / 2) % per_line;  // never written
        if (ref[kept] != tools::pattern_word(kept * 8)) wrong.fetch_add(1);
      }
    });
    a.check();
    EXPECT_EQ(wrong.load(), 0u) << "overlapped " << overlapped;
    const cache_stats st = a.stats();
    EXPECT_GT(st.writebacks, 0u) << "overlapped " << overlapped;
    if (overlapped)
      EXPECT_GT(st.overlapped_evictions, 0u);
    else
      EXPECT_EQ(st.overlapped_evictions, 0u);
    a.flush();
    EXPECT_EQ(file_mismatches(f.path(), ref.size(),
                              [&](std::uint64_t i) {
                                const std::uint64_t l = i / per_line;
                                return i == l * per_line + l % per_line
                                           ? new_word(i)
                                           : tools::pattern_word(i * 8);
                              }),
              0u)
        << "overlapped " << overlapped;
  }
}

TEST_P(ArrayWrite, WriteSpanWholeAndPartialLines) {
  array<std::uint64_t> a(file_.path(), 0, write_options(GetParam(), 512));
  const array_ref<std::uint64_t> ref = a.ref();
  std::vector<std::uint64_t> in(5000);
  const std::uint64_t first = 12345;  // starts and ends inside a line
  for (std::size_t k = 0; k < in.size(); ++k) in[k] = new_word(first + k);
  ASSERT_TRUE(ref.write_span(first, in.size(), in.data()));
  std::vector<std::uint64_t> out(in.size());
  ASSERT_TRUE(ref.read_span(first, out.size(), out.data()));
  EXPECT_EQ(out, in);
  a.flush();
  EXPECT_EQ(file_mismatches(file_.path(), ref.size(),
                            [&](std::uint64_t i) {
                              return i >= first && i < first + in.size()
                                         ? new_word(i)
                                         : tools::pattern_word(i * 8);
                            }),
            0u);
  EXPECT_FALSE(ref.write_span(ref.size() - 2, 3, in.data()));
  EXPECT_THROW(a.check(), index_error);
}

TEST_P(ArrayWrite, DeviceInitiatedFlush) {
  array<std::uint64_t> a(file_.path(), 0, write_options(GetParam()));
  const array_ref<std::uint64_t> ref = a.ref();
  test::run_lanes(4, [&](unsigned lane) {
    for (std::uint64_t i = lane; i < 100000; i += 4) ref.store(i, new_word(i));
  });
  EXPECT_TRUE(ref.flush());  // one lane, as one warp of a kernel would
  a.check();
  if (GetParam().kind == controller_kind::memory) a.flush();  // pinned memory to the file
  EXPECT_EQ(file_mismatches(file_.path(), ref.size(),
                            [](std::uint64_t i) {
                              return i < 100000 ? new_word(i) : tools::pattern_word(i * 8);
                            }),
            0u);
  // Nothing of the array is left dirty.
  const cache_ref& c = ref.cache;
  for (std::uint32_t s = 0; s < c.num_lines; ++s) EXPECT_EQ(c.states[s] & line_state::dirty, 0u);
}

// Writing back one dirty line takes the dirty lines of its cluster (its
// aligned group of write_cluster_lines) along, and no line beyond it.
TEST_P(ArrayWrite, WriteBackTakesTheDirtyLinesOfItsCluster) {
  options o = write_options(GetParam());
  o.cache_bytes = 1 << 20;  // 256 lines in 16 sets of 16: the lines below all stay
  o.ways = 16;
  array<std::uint64_t> a(file_.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  constexpr std::uint64_t per_line = 4096 / 8;
  constexpr std::uint64_t cluster = detail::line_io::write_cluster_lines;
  const std::uint64_t lines = cluster + 8;  // one whole cluster and part of the next
  auto word_of = [&](std::uint64_t line) { return line * per_line + 3; };
  for (std::uint64_t line = 0; line < lines; ++line)
    ref.store(word_of(line), new_word(word_of(line)));
  a.check();
  ASSERT_EQ(a.stats().writebacks, 0u);

  std::uint32_t slot = 0;
  std::uint64_t key = 0;
  ASSERT_TRUE(ref.cache.claim_dirty_key(cache_ref::key(ref.source, 5), slot, key));
  EXPECT_EQ(key, cache_ref::key(ref.source, 5));
  EXPECT_TRUE(ref.lines().write_back_clustered(1u, true, slot, key));
  a.check();
  EXPECT_EQ(a.stats().writebacks, cluster);
  // The cluster's lines are clean, the next cluster's still dirty.
  for (std::uint64_t line = 0; line < lines; ++line) {
    std::uint64_t k = 0;
    const bool was_dirty = ref.cache.claim_dirty_key(cache_ref::key(ref.source, line), slot, k);
    EXPECT_EQ(was_dirty, line >= cluster) << "line " << line;
    if (was_dirty) ref.cache.finish_write_back(slot, false);  // not written: still dirty
  }
  if (GetParam().kind == controller_kind::host) {
    // Only the cluster reached the file.
    EXPECT_EQ(lines_written_mismatches(file_.path(), ref.size(), per_line, 3, cluster), 0u);
  }
  a.flush();
  EXPECT_EQ(lines_written_mismatches(file_.path(), ref.size(), per_line, 3, lines), 0u);
}

// A flush's first pass: a cluster is written by whoever finds its first
// dirty line, whole, and by nobody else.
TEST_P(ArrayWrite, FlushWritesEachClusterFromItsFirstDirtyLine) {
  options o = write_options(GetParam());
  o.cache_bytes = 1 << 20;
  o.ways = 16;
  array<std::uint64_t> a(file_.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  const cache_ref& c = ref.cache;
  constexpr std::uint64_t per_line = 4096 / 8;
  constexpr std::uint64_t cluster = detail::line_io::write_cluster_lines;
  for (std::uint64_t line = 0; line < 2 * cluster; ++line)
    ref.store(line * per_line, new_word(line * per_line));
  auto slot_of = [&](std::uint64_t line) {
    for (std::uint32_t s = 0; s < c.num_lines; ++s)
      if (c.tag_of(s) == cache_ref::key(ref.source, line)) return s;
    ADD_FAILURE() << "line " << line << " is not cached";
    return std::uint32_t{0};
  };
  auto dirty_lines = [&](std::uint64_t from, std::uint64_t to) {
    std::uint64_t n = 0;
    for (std::uint64_t line = from; line < to; ++line)
      n += (c.state_of_key(cache_ref::key(ref.source, line)) & line_state::dirty) != 0;
    return n;
  };
  // Line 5 is not its cluster's first dirty line: left alone.
  ref.lines().write_back_clusters(1u, slot_of(5), 1);
  EXPECT_EQ(a.stats().writebacks, 0u);
  EXPECT_EQ(dirty_lines(0, 2 * cluster), 2 * cluster);
  // The second cluster's first line takes its whole cluster.
  ref.lines().write_back_clusters(1u, slot_of(cluster), 1);
  EXPECT_EQ(a.stats().writebacks, cluster);
  EXPECT_EQ(dirty_lines(0, cluster), cluster);
  EXPECT_EQ(dirty_lines(cluster, 2 * cluster), 0u);
  // Over every slot: the first cluster too, once.
  ref.lines().write_back_clusters(1u, 0, c.num_lines);
  a.check();
  EXPECT_EQ(a.stats().writebacks, 2 * cluster);
  EXPECT_EQ(dirty_lines(0, 2 * cluster), 0u);
  a.flush();
  EXPECT_EQ(lines_written_mismatches(file_.path(), ref.size(), per_line, 0, 2 * cluster), 0u);
}

// Eager write-back: the write_span that completes a cluster writes it back;
// one line short of it, nothing goes; turned off, nothing goes before the
// flush.
TEST_P(ArrayWrite, WriteSpanThatCompletesAClusterWritesItBack) {
  constexpr std::uint64_t per_line = 4096 / 8;
  constexpr std::uint64_t cluster = detail::line_io::write_cluster_lines;
  std::vector<std::uint64_t> in(cluster * per_line);
  for (std::uint64_t k = 0; k < in.size(); ++k) in[k] = new_word(k);
  auto written_below = [](std::uint64_t words) {
    return
        [words](std::uint64_t i) { return i < words ? new_word(i) : tools::pattern_word(i * 8); };
  };
  for (const bool eager : {true, false}) {
    options o = write_options(GetParam());
    o.cache_bytes = 1 << 20;
    o.ways = 16;
    o.eager_write_back = eager;
    array<std::uint64_t> a(file_.path(), 0, o);
    const array_ref<std::uint64_t> ref = a.ref();
    ASSERT_TRUE(ref.write_span(0, (cluster - 1) * per_line, in.data()));
    EXPECT_EQ(a.stats().writebacks, 0u) << "eager " << eager;
    ASSERT_TRUE(ref.write_span((cluster - 1) * per_line, per_line, &in[(cluster - 1) * per_line]));
    a.check();
    EXPECT_EQ(a.stats().writebacks, eager ? cluster : 0u) << "eager " << eager;
    if (eager && GetParam().kind == controller_kind::host) {  // in the file before any flush
      EXPECT_EQ(file_mismatches(file_.path(), ref.size(), written_below(in.size())), 0u);
    }
    a.flush();
    EXPECT_EQ(file_mismatches(file_.path(), ref.size(), written_below(in.size())), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Controllers, ArrayWrite, test::write_cases(), test::write_case_name);

TEST(ArrayWriteReadOnly, StoresToAReadOnlyOpenAreRefused) {
  test::pattern_file file(1 << 20);
  options o = write_options({controller_kind::host, delivery::gpu_pull});
  o.writable = false;
  array<std::uint64_t> a(file.path(), 0, o);
  EXPECT_FALSE(a.writable());
  a.ref().store(5, 42);
  try {
    a.check();
    FAIL() << "no error raised";
  } catch (const io_error& e) {
    EXPECT_EQ(e.status().code(), nvme::sc::namespace_write_protected);
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.ref()[5], tools::pattern_word(5 * 8));  // the cache was not touched
  a.flush();
  EXPECT_EQ(file_mismatches(file.path(), a.size(),
                            [](std::uint64_t i) { return tools::pattern_word(i * 8); }),
            0u);
}

TEST(ArrayWriteShared, TwoArraysInOneCacheFlushTheirOwnLines) {
  test::pattern_file file(4 << 20);
  const options o = write_options({controller_kind::host, delivery::gpu_pull});
  auto c = std::make_shared<cache>(o);
  auto ctl = make_controller(file.path(), o);
  array<std::uint64_t> low(c, ctl, 1 << 18, 0, o);
  array<std::uint64_t> high(c, ctl, 1 << 18, 2 << 20, o);
  test::run_lanes(4, [&](unsigned lane) {
    for (std::uint64_t i = lane; i < low.size(); i += 4) {
      low.ref().store(i, new_word(i));
      high.ref().store(i, new_word(i + (1 << 18)));
    }
  });
  low.flush();
  high.flush();
  EXPECT_EQ(file_mismatches(file.path(), file.bytes() / 8, new_word), 0u);
}
