// Bulk reads (array_base::read_range, src/controller/bulk_reader.h) on the
// CPU target against real files: ranges at offsets aligned to nothing,
// ranges across chunk boundaries, buffered and O_DIRECT files, destinations
// aligned to nothing, several callers at once on few threads, a writable
// array whose dirty lines are still in the cache, interrupts, and errors.
#include "controller/bulk_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_files.h"
#include "write_cases.h"
#include "warpstore/array.cuh"
#include "warpstore/error.h"

using namespace warpstore;
using host_detail::bulk_reader;

namespace {

constexpr std::uint64_t small_chunk = bulk_reader::chunk_granule;  // 64 KiB: many boundaries

// The whole file as the kernel returns it: what every read must match.
std::vector<std::byte> file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::vector<std::byte> b(static_cast<std::size_t>(size));
  const ssize_t r = ::pread(fd, b.data(), b.size(), 0);
  ::close(fd);
  if (r != size) throw std::runtime_error("short read of " + path);
  return b;
}

// Bytes of `got` that differ from want[offset, offset + got.size()).
std::size_t mismatches(const std::vector<std::byte>& want, std::uint64_t offset,
                       const std::byte* got, std::size_t n) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += got[i] != want[offset + i];
  return bad;
}

// Ranges a bulk read must get right with 64 KiB chunks over `size` bytes.
std::vector<std::pair<std::uint64_t, std::uint64_t>> awkward_ranges(std::uint64_t size) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> r = {
      {0, size},                                  // everything
      {0, 1},                                     // one byte
      {size - 1, 1},                              // the last byte
      {3, 5},                                     // inside one block
      {small_chunk - 7, 14},                      // across one chunk boundary
      {small_chunk, small_chunk},                 // exactly one chunk
      {small_chunk - 1, small_chunk + 2},         // one chunk and a byte each side
      {4095, 3 * small_chunk + 4099},             // unaligned both ends, several chunks
      {512, 5 * small_chunk},                     // block-aligned, not chunk-aligned
      {size - 3 * small_chunk - 13, 3 * small_chunk + 13},  // up to the end
  };
  test::lane_rng rng{42};
  for (int i = 0; i < 24; ++i) {
    const std::uint64_t off = rng.next() % size;
    r.emplace_back(off, 1 + rng.next() % (size - off));
  }
  return r;
}

class BulkRead : public ::testing::TestWithParam<direct_io> {
 protected:
  // Not a multiple of 512: the last O_DIRECT block is partial.
  test::pattern_file file_{(1u << 20) + 333};
};

std::string mode_name(const ::testing::TestParamInfo<direct_io>& info) {
  return info.param == direct_io::on ? "Direct" : "Buffered";
}

}  // namespace

TEST_P(BulkRead, ReaderGetsAwkwardRangesRightIntoUnalignedDestinations) {
  std::shared_ptr<backing_file> f;
  try {
    f = std::make_shared<backing_file>(file_.path(), GetParam());
  } catch (const file_error& e) {
    GTEST_SKIP() << "O_DIRECT is not available here: " << e.what();
  }
  ASSERT_EQ(f->direct(), GetParam() == direct_io::on);
  const std::vector<std::byte> want = file_bytes(file_.path());
  bulk_reader reader(bulk_reader::config{small_chunk, 4});
  std::vector<std::byte> out(want.size() + 64);
  for (const auto& [off, len] : awkward_ranges(f->size_bytes())) {
    for (std::uint64_t shift : {0u, 1u, 8u}) {  // destinations aligned to nothing, 8, 4096
      std::byte* dst = out.data() + shift;
      std::memset(out.data(), 0xEE, out.size());
      reader.read(*f, off, len, dst);
      ASSERT_EQ(mismatches(want, off, dst, len), 0u) << "offset " << off << " bytes " << len
                                                     << " destination +" << shift;
      // Not a byte beyond the range.
      for (std::uint64_t i = shift + len; i < out.size(); ++i)
        ASSERT_EQ(out[i], std::byte{0xEE}) << "wrote past the range at " << i - shift;
      for (std::uint64_t i = 0; i < shift; ++i) ASSERT_EQ(out[i], std::byte{0xEE});
    }
  }
}

TEST_P(BulkRead, ArrayReadRangeIsTheFileFromTheArraysOffset) {
  // The default chunk, and the smallest bulk_chunk (many chunks a call).
  for (const std::uint32_t chunk : {options{}.bulk_chunk, 64u << 10}) {
    options o;
    o.direct = GetParam();
    o.cache_bytes = 256 << 10;
    o.service_threads = 1;
    o.queue_pairs = 1;
    o.bulk_chunk = chunk;
    const std::uint64_t offset = 8192;
    std::unique_ptr<array<std::uint32_t>> a;
    try {
      a = std::make_unique<array<std::uint32_t>>(file_.path(), 0, o, offset);
    } catch (const file_error& e) {
      GTEST_SKIP() << "O_DIRECT is not available here: " << e.what();
    }
    const std::vector<std::byte> want = file_bytes(file_.path());
    EXPECT_EQ(a->size_bytes(), (want.size() - offset) / 4 * 4);
    std::vector<std::byte> out(a->size_bytes() + 1);
    for (const auto& [off, len] : awkward_ranges(a->size_bytes())) {
      a->read_range(off, len, out.data() + 1);
      ASSERT_EQ(mismatches(want, offset + off, out.data() + 1, len), 0u)
          << "offset " << off << " bytes " << len << " bulk_chunk " << chunk;
    }
    a->read_range(5, 0, out.data());  // nothing to read
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BulkRead, ::testing::Values(direct_io::off, direct_io::on),
                         mode_name);

TEST(BulkReadThreads, ManyCallersShareFewThreads) {
  test::pattern_file file(3u << 20);
  const std::vector<std::byte> want = file_bytes(file.path());
  backing_file f(file.path(), direct_io::off);
  bulk_reader reader(bulk_reader::config{small_chunk, 2});
  std::atomic<std::uint64_t> bad{0};
  test::run_lanes(6, [&](unsigned lane) {
    test::lane_rng rng{lane + 1};
    std::vector<std::byte> out(want.size());
    for (int i = 0; i < 20; ++i) {
      const std::uint64_t off = rng.next() % want.size();
      const std::uint64_t len = 1 + rng.next() % (want.size() - off);
      reader.read(f, off, len, out.data());
      bad += mismatches(want, off, out.data(), len);
    }
  });
  EXPECT_EQ(bad.load(), 0u);
}

// Helpers sleep between calls (the same threads serve call after call) and
// leave once idle for the linger, freeing their buffers; a later call
// starts them again and reads right.
TEST(BulkReadThreads, HelpersSleepBetweenCallsAndLeaveWhenIdle) {
  test::pattern_file file(3u << 20);
  const std::vector<std::byte> want = file_bytes(file.path());
  // O_DIRECT where there is: an unaligned destination then sends every
  // chunk through a lane's buffer.
  std::unique_ptr<backing_file> f;
  try {
    f = std::make_unique<backing_file>(file.path(), direct_io::on);
  } catch (const file_error&) {
    f = std::make_unique<backing_file>(file.path(), direct_io::off);
  }
  const unsigned before = test::threads_named("warpstore-bulk");  // the process reader's, if any
  // A linger of 2 s: a sanitizer build on a loaded 2-core machine may take
  // longer than a shorter one between two reads of the loop below.
  bulk_reader reader(bulk_reader::config{small_chunk, 4, 2'000'000'000});
  std::vector<std::byte> out(want.size() + 1);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 20; ++i) {
      reader.read(*f, 0, want.size(), out.data() + 1);
      ASSERT_EQ(mismatches(want, 0, out.data() + 1, want.size()), 0u) << "round " << round;
      // Within the linger: every lane's helper sleeps, none more started.
      EXPECT_EQ(reader.live_helpers(), 4u);
      EXPECT_LE(test::threads_named("warpstore-bulk"), before + 4);
    }
    if (f->direct()) {
      EXPECT_EQ(reader.lanes_holding_buffers(), 4u);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((reader.live_helpers() != 0 || reader.lanes_holding_buffers() != 0) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(reader.live_helpers(), 0u) << "round " << round;
    EXPECT_EQ(reader.lanes_holding_buffers(), 0u) << "round " << round;
  }
}

TEST(BulkReadThreads, CallChunksKeepEveryThreadBusy) {
  bulk_reader reader(bulk_reader::config{bulk_reader::default_chunk_bytes, 12});
  // Large ranges: the full chunk.
  EXPECT_EQ(reader.call_chunk_bytes(std::uint64_t{1} << 30), bulk_reader::default_chunk_bytes);
  // 64 MiB over 12 threads: about four chunks each, at fixed granules.
  const std::uint64_t c64 = reader.call_chunk_bytes(64u << 20);
  EXPECT_EQ(c64 % bulk_reader::chunk_granule, 0u);
  EXPECT_GE((64u << 20) / c64, 4u * 12 - 12);
  EXPECT_LE((64u << 20) / c64, 4u * 12 + 1);
  // Small ranges: not below the floor.
  EXPECT_EQ(reader.call_chunk_bytes(1), bulk_reader::min_call_chunk_bytes);
  // A reader of small chunks keeps them.
  bulk_reader small(bulk_reader::config{small_chunk, 4});
  EXPECT_EQ(small.call_chunk_bytes(1), small_chunk);
  EXPECT_EQ(small.call_chunk_bytes(std::uint64_t{1} << 30), small_chunk);
}

TEST(BulkReadThreads, TheProcessReaderOutlivesItsArrays) {
  const std::shared_ptr<bulk_reader> first = bulk_reader::acquire();
  bulk_reader* raw = first.get();
  EXPECT_EQ(bulk_reader::acquire().get(), raw);
  EXPECT_GE(first.use_count(), 2);  // held by the process as well
}

// stats() says what the calls did: their bytes, chunks and lanes, who
// read the chunks, and where the time went (a host destination: no copies
// to wait for).
TEST(BulkReadThreads, StatsCountEachCall) {
  test::pattern_file file(3u << 20);
  const std::vector<std::byte> want = file_bytes(file.path());
  backing_file f(file.path(), direct_io::off);
  bulk_reader reader(bulk_reader::config{small_chunk, 3});
  EXPECT_EQ(reader.stats().calls, 0u);
  std::vector<std::byte> out(want.size());
  reader.read(f, 0, want.size(), out.data());
  reader.read(f, 100, 1000, out.data());
  EXPECT_EQ(mismatches(want, 100, out.data(), 1000), 0u);
  const bulk_read_stats s = reader.stats();
  EXPECT_EQ(s.calls, 2u);
  EXPECT_EQ(s.bytes, want.size() + 1000);
  const std::uint64_t chunk = reader.call_chunk_bytes(want.size());
  EXPECT_EQ(s.chunks, (want.size() + chunk - 1) / chunk + 1);  // the second call: one chunk
  EXPECT_GE(s.caller_chunks, 1u);  // the second call's chunk (no helper there)
  EXPECT_LE(s.caller_chunks, s.chunks);
  EXPECT_EQ(s.lanes, 3u + 1u);
  EXPECT_EQ(s.helpers, 2u);
  EXPECT_GT(s.read_ns, 0u);
  EXPECT_GT(s.call_ns, 0u);
  EXPECT_GT(s.wake_ns, 0u);
  EXPECT_EQ(s.buffer_wait_ns, 0u);
  EXPECT_EQ(s.drain_ns, 0u);
  // The process's reader is what bulk_read_totals() reports.
  const bulk_read_stats before = bulk_read_totals();
  options o;
  o.cache_bytes = 256 << 10;
  o.service_threads = 1;
  o.queue_pairs = 1;
  array<std::uint32_t> a(file.path(), 0, o);
  a.read_range(0, 4096, out.data());
  const bulk_read_stats after = bulk_read_totals();
  EXPECT_EQ(after.calls, before.calls + 1);
  EXPECT_EQ(after.bytes, before.bytes + 4096);
}

TEST(BulkReadThreads, RejectsBadConfigs) {
  EXPECT_THROW(bulk_reader(bulk_reader::config{small_chunk + 512, 1}), warpstore::invalid_argument);
  EXPECT_THROW(bulk_reader(bulk_reader::config{0, 1}), warpstore::invalid_argument);
  EXPECT_THROW(bulk_reader(bulk_reader::config{small_chunk, bulk_reader::max_threads + 1}),
               warpstore::invalid_argument);
  EXPECT_GE(bulk_reader::default_threads(), 1u);
  EXPECT_LE(bulk_reader::default_threads(), bulk_reader::max_threads);
}

// The default threads follow the cores this process may use, not the
// machine's: a process a scheduler confined to one core reads with one.
TEST(BulkReadThreads, DefaultFollowsTheProcessesCores) {
  const unsigned cores = process_cores();
  EXPECT_EQ(bulk_reader::default_threads(),
            std::clamp(cores - cores / 4, 1u, bulk_reader::max_threads));
  const auto confined = test::on_one_core([] { return bulk_reader::default_threads(); });
  ASSERT_TRUE(confined.has_value());
  EXPECT_EQ(*confined, 1u);
}

TEST(BulkReadErrors, OutOfRangeNamesThePathAndOffset) {
  test::pattern_file file(64 << 10);
  array<std::uint64_t> a(file.path());
  std::vector<std::byte> out(a.size_bytes() + 16);
  try {
    a.read_range(a.size_bytes() - 8, 16, out.data());
    FAIL() << "a range past the end was read";
  } catch (const warpstore::invalid_argument& e) {
    EXPECT_EQ(e.kind(), error_kind::invalid_argument);
    EXPECT_EQ(e.path(), file.path());
    EXPECT_EQ(e.offset().value_or(0), a.size_bytes() - 8);
    EXPECT_NE(std::string(e.what()).find(file.path()), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.read_range(~std::uint64_t{0}, 2, out.data()), warpstore::invalid_argument);
  EXPECT_THROW(a.read_range(0, 8, nullptr), warpstore::invalid_argument);
  backing_file f(file.path(), direct_io::off);
  bulk_reader reader(bulk_reader::config{small_chunk, 2});
  EXPECT_THROW(reader.read(f, 60 << 10, 8 << 10, out.data()), warpstore::invalid_argument);
}

TEST(BulkReadErrors, AFileThatShrankIsAFileErrorAtTheOffset) {
  for (const direct_io mode : {direct_io::off, direct_io::on}) {
    test::pattern_file file(1u << 20);
    std::shared_ptr<backing_file> f;
    try {
      f = std::make_shared<backing_file>(file.path(), mode);
    } catch (const file_error&) {
      continue;  // no O_DIRECT here
    }
    ASSERT_EQ(::truncate(file.path().c_str(), 300000), 0);
    bulk_reader reader(bulk_reader::config{small_chunk, 3});
    std::vector<std::byte> out(1u << 20);
    try {
      reader.read(*f, 1000, (1u << 20) - 1000, out.data());
      FAIL() << "a read past the new end of the file succeeded";
    } catch (const file_error& e) {
      EXPECT_EQ(e.kind(), error_kind::file);
      EXPECT_EQ(e.code().value(), EIO);
      EXPECT_EQ(e.path(), file.path());
      ASSERT_TRUE(e.offset().has_value());
      // Where a thread found the data missing: at or past the new end (or
      // its O_DIRECT block), inside the range.
      EXPECT_GE(*e.offset(), 299008u) << e.what();
      EXPECT_LT(*e.offset(), 1u << 20) << e.what();
      EXPECT_NE(std::string(e.what()).find("now 300000 bytes"), std::string::npos) << e.what();
    }
    // What is still there reads fine.
    const std::vector<std::byte> want = file_bytes(file.path());
    reader.read(*f, 100, 299000, out.data());
    EXPECT_EQ(mismatches(want, 100, out.data(), 299000), 0u);
  }
}

TEST(BulkReadErrors, InterruptStopsTheReadAndTheReaderStaysUsable) {
  test::pattern_file file(2u << 20);
  backing_file f(file.path(), direct_io::off);
  bulk_reader reader(bulk_reader::config{small_chunk, 2});
  std::vector<std::byte> out(file.bytes());
  int polls = 0;
  try {
    reader.read(f, 0, file.bytes(), out.data(), 0, [&] { return ++polls >= 1; });
    FAIL() << "an interrupted read finished";
  } catch (const warpstore::runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::cancelled);
    EXPECT_EQ(e.path(), file.path());
  }
  EXPECT_EQ(polls, 1);
  const std::vector<std::byte> want = file_bytes(file.path());
  int later = 0;
  reader.read(f, 17, file.bytes() - 17, out.data(), 0, [&] { return ++later < 0; });
  EXPECT_GE(later, 1);  // asked at least once, before the first chunk
  EXPECT_EQ(mismatches(want, 17, out.data(), file.bytes() - 17), 0u);
}

// Bytes a controller already holds in pinned memory (the memory
// controller's mapping of the page cache; on this target a plain buffer and
// memcpy "copies"): awkward ranges in pieces of every size, nothing written
// outside the range, each call counted once with its pieces.
TEST(BulkReadPinned, CopiesAwkwardRangesInPieces) {
  test::pattern_file file((1u << 20) + 333);
  const std::vector<std::byte> want = file_bytes(file.path());
  bulk_reader reader(bulk_reader::config{small_chunk, 2});
  std::vector<std::byte> out(want.size() + 64);
  std::uint64_t calls = 0, bytes = 0, pieces = 0;
  for (const std::uint64_t piece :
       {std::uint64_t{512}, std::uint64_t{4096 + 7}, bulk_reader::pinned_piece_bytes}) {
    for (const auto& [off, len] : awkward_ranges(want.size())) {
      std::memset(out.data(), 0xEE, out.size());
      int polls = 0;
      reader.copy_pinned(want.data() + off, len, out.data() + 1, 0, [&] { return ++polls < 0; },
                         file.path(), off, piece);
      ASSERT_EQ(mismatches(want, off, out.data() + 1, len), 0u)
          << "offset " << off << " bytes " << len << " pieces of " << piece;
      ASSERT_EQ(out[0], std::byte{0xEE});
      for (std::uint64_t i = 1 + len; i < out.size(); ++i)
        ASSERT_EQ(out[i], std::byte{0xEE}) << "wrote past the range at " << i - 1;
      EXPECT_GE(polls, 1);  // asked before the first piece
      ++calls;
      bytes += len;
      pieces += (len + piece - 1) / piece;
    }
  }
  reader.copy_pinned(want.data(), 0, nullptr, 0, {}, file.path(), 0);  // nothing to copy
  const bulk_read_stats s = reader.stats();
  EXPECT_EQ(s.calls, calls);
  EXPECT_EQ(s.bytes, bytes);
  EXPECT_EQ(s.chunks, pieces);
  EXPECT_EQ(s.caller_chunks, pieces);
  EXPECT_EQ(s.lanes, 0u);    // no lane, no helper thread, no pread
  EXPECT_EQ(s.helpers, 0u);
  EXPECT_EQ(s.read_ns, 0u);
  EXPECT_EQ(reader.live_helpers(), 0u);
}

// An interrupt stops the copy between pieces: the pieces sent are whole,
// nothing after them is written, and the error names the path and offset.
TEST(BulkReadPinned, InterruptStopsBetweenPieces) {
  test::pattern_file file(1u << 20);
  const std::vector<std::byte> want = file_bytes(file.path());
  bulk_reader reader(bulk_reader::config{small_chunk, 2});
  std::vector<std::byte> out(want.size());
  std::memset(out.data(), 0xEE, out.size());
  constexpr std::uint64_t piece = 4096;
  int polls = 0;
  // The first poll comes before the first piece and takes longer than the
  // poll interval, so the second comes before the second piece.
  const auto interrupt = [&] {
    if (++polls == 1) {
      std::this_thread::sleep_for(
          std::chrono::nanoseconds(bulk_reader::poll_interval_ns + 1'000'000));
      return false;
    }
    return true;
  };
  try {
    reader.copy_pinned(want.data() + 100, want.size() - 100, out.data(), 0, interrupt,
                       file.path(), 100, piece);
    FAIL() << "an interrupted copy finished";
  } catch (const warpstore::runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::cancelled);
    EXPECT_EQ(e.path(), file.path());
    ASSERT_TRUE(e.offset().has_value());
    EXPECT_EQ(*e.offset(), 100u);
  }
  EXPECT_EQ(polls, 2);
  EXPECT_EQ(mismatches(want, 100, out.data(), piece), 0u) << "the piece sent is not whole";
  for (std::uint64_t i = piece; i < out.size(); ++i)
    ASSERT_EQ(out[i], std::byte{0xEE}) << "copied after the interrupt at " << i;
  EXPECT_EQ(reader.stats().bytes, piece);
  // The reader stays usable.
  reader.copy_pinned(want.data(), want.size(), out.data(), 0, {}, file.path(), 0, piece);
  EXPECT_EQ(mismatches(want, 0, out.data(), want.size()), 0u);
}

TEST(BulkReadPinned, NullPointersAndEmptyPiecesAreInvalidArguments) {
  bulk_reader reader(bulk_reader::config{small_chunk, 1});
  std::vector<std::byte> b(16);
  EXPECT_THROW(reader.copy_pinned(nullptr, 4, b.data(), 0, {}, "f", 0), warpstore::invalid_argument);
  EXPECT_THROW(reader.copy_pinned(b.data(), 4, nullptr, 0, {}, "f", 0), warpstore::invalid_argument);
  EXPECT_THROW(reader.copy_pinned(b.data(), 4, b.data() + 8, 0, {}, "f", 0, 0),
               warpstore::invalid_argument);
  EXPECT_EQ(reader.stats().calls, 0u);
}

// A writable array reads back its own writes: the dirty lines still in the
// cache are written back before the file is read.
class BulkReadWritable : public ::testing::TestWithParam<test::write_case> {};

TEST_P(BulkReadWritable, SeesDirtyLinesOfTheCache) {
  test::pattern_file file(1u << 20);
  options o;
  o.controller = GetParam().kind;
  o.deliver = GetParam().deliver;
  o.writable = true;
  o.cache_bytes = 256 << 10;  // the stores below stay in the cache
  o.line_size = 4096;
  o.service_threads = 1;
  o.queue_pairs = 2;
  o.queue_depth = 8;
  o.direct = direct_io::off;
  array<std::uint64_t> a(file.path(), 0, o);
  const array_ref<std::uint64_t> ref = a.ref();
  // One word in each of 32 lines, some across the 64 KiB boundary.
  std::vector<std::uint64_t> at;
  for (std::uint64_t i = 0; i < 32; ++i) at.push_back(i * 1031 + 5);
  for (std::uint64_t i : at) ref.store(i, 0xABCD000000000000ull + i);
  // The writes are only in the cache so far: a plain read of the file is stale.
  std::uint64_t stale = 0;
  {
    const std::vector<std::byte> before = file_bytes(file.path());
    for (std::uint64_t i : at) {
      std::uint64_t w;
      std::memcpy(&w, before.data() + i * 8, 8);
      stale += w == tools::pattern_word(i * 8);
    }
  }
  EXPECT_GT(stale, 0u) << "nothing was left dirty in the cache: the test proves nothing";
  std::vector<std::uint64_t> out(40000);
  a.read_range(0, out.size() * 8, out.data());
  a.check();
  for (std::uint64_t i = 0; i < out.size(); ++i) {
    const bool written = std::find(at.begin(), at.end(), i) != at.end();
    ASSERT_EQ(out[i], written ? 0xABCD000000000000ull + i : tools::pattern_word(i * 8))
        << "word " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Controllers, BulkReadWritable, test::write_cases(),
                         test::write_case_name);
