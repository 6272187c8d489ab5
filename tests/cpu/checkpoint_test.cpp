// Checkpoint groups on the CPU target (std::threads as warps) against the
// real controllers: round trips of buffers of every awkward size and of a
// warpstore array, the "no checkpoint yet" state, the device form from
// threads, restoring with another chunk size, fallback past corrupt data,
// and the refusals (another layout, no data verifying).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/durable/checkpoint.cuh"

namespace {

using namespace warpstore;

options test_options(std::uint32_t line = 4096, controller_kind kind = controller_kind::host) {
  options o{};
  o.controller = kind;
  o.line_size = line;
  o.cache_bytes = 1 << 20;
  o.service_threads = 2;
  // Buffered: see the note in tests/crash/checkpoint_workload_test.cpp.
  o.direct = direct_io::off;
  o.timeout_ns = 30'000'000'000ull;
  return o;
}

// Buffers in "device" memory (host memory on the CPU target) with a known fill.
struct buffers {
  std::vector<std::uint64_t> sizes;
  std::vector<runtime::device_ptr<std::byte>> mem;
  explicit buffers(std::vector<std::uint64_t> s) : sizes(std::move(s)) {
    for (std::uint64_t b : sizes) mem.push_back(runtime::make_device<std::byte>(b));
  }
  void fill(std::uint64_t seed) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> h(sizes[i]);
      test::lane_rng r{seed * 1000 + i};
      for (auto& x : h) x = static_cast<std::byte>(r.next());
      runtime::copy_to_device(mem[i].get(), h.data(), h.size());
    }
  }
  // Bytes that differ from fill(seed).
  std::uint64_t differing(std::uint64_t seed) const {
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> h(sizes[i]), want(sizes[i]);
      runtime::copy_to_host(h.data(), mem[i].get(), h.size());
      test::lane_rng r{seed * 1000 + i};
      for (auto& x : want) x = static_cast<std::byte>(r.next());
      for (std::size_t k = 0; k < h.size(); ++k) bad += h[k] != want[k];
    }
    return bad;
  }
  void add_to(checkpoint_group& g) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::string name = std::to_string(i);
      name.insert(0, "buffer ");
      g.add(mem[i].get(), sizes[i], name);
    }
  }
};

const std::vector<std::uint64_t> awkward = {1, 13, 4096, 4097, 100000, 8, 65536 * 3 + 512};

class CheckpointRoundTrip : public ::testing::TestWithParam<std::tuple<std::uint32_t, controller_kind>> {};

TEST_P(CheckpointRoundTrip, EveryByteComesBackFromTheNewestCheckpoint) {
  const auto [line, kind] = GetParam();
  test::scratch_file f("ckpt-test");
  buffers b(awkward);
  {
    checkpoint_group g;
    b.add_to(g);
    g.open(f.path, test_options(line, kind));
    EXPECT_EQ(g.latest_sequence(), 0u);
    b.fill(1);
    EXPECT_EQ(g.checkpoint(), 1u);
    b.fill(2);
    EXPECT_EQ(g.checkpoint(), 2u);
    b.fill(3);
    EXPECT_EQ(g.checkpoint(), 3u);
    b.fill(99);
    const restore_result r = g.restore();
    ASSERT_TRUE(r.restored());
    EXPECT_EQ(r.sequence, 3u);
    EXPECT_EQ(b.differing(3), 0u);
  }
  // Another process (a new group) finds it too, with another chunk size.
  b.fill(98);
  checkpoint_group g;
  b.add_to(g);
  g.open(f.path, test_options(line == 4096 ? 65536 : 4096, kind));
  EXPECT_EQ(g.latest_sequence(), 3u);
  const restore_result r = g.restore();
  ASSERT_TRUE(r.restored());
  EXPECT_EQ(r.sequence, 3u);
  EXPECT_EQ(b.differing(3), 0u);
  // The next checkpoint goes to the other slot: both stay restorable.
  b.fill(4);
  EXPECT_EQ(g.checkpoint(), 4u);
}

INSTANTIATE_TEST_SUITE_P(Lines, CheckpointRoundTrip,
                         ::testing::Combine(::testing::Values(512u, 4096u, 65536u),
                                            ::testing::Values(controller_kind::host,
                                                              controller_kind::memory,
                                                              controller_kind::nvme_model)));

// Opens g over `path` with b's buffers and commits checkpoints 1 and 2 (b
// filled with 1, then with 2).
void open_and_commit_two(checkpoint_group& g, buffers& b, const std::string& path) {
  b.add_to(g);
  g.open(path, test_options());
  b.fill(1);
  g.checkpoint();
  b.fill(2);
  g.checkpoint();
}

TEST(Checkpoint, FreshFileIsNoCheckpointYetAndTouchesNothing) {
  test::scratch_file f("ckpt-test");
  buffers b({4096, 100});
  b.fill(7);
  checkpoint_group g;
  b.add_to(g);
  g.open(f.path, test_options());
  const restore_result r = g.restore();
  EXPECT_EQ(r.outcome, checkpoint_outcome::empty);
  EXPECT_FALSE(r.restored());
  EXPECT_EQ(b.differing(7), 0u);
  EXPECT_GE(std::filesystem::file_size(f.path), g.layout().file_bytes);
}

TEST(Checkpoint, DeviceFormFromThreads) {
  test::scratch_file f("ckpt-test");
  buffers b({300000, 5000});
  checkpoint_group g;
  b.add_to(g);
  g.open(f.path, test_options());
  const checkpoint_ref ref = g.ref();
  for (std::uint64_t round = 1; round <= 3; ++round) {
    b.fill(round);
    const unsigned warps = 5;
    test::run_lanes(warps, [&](unsigned w) { ref.checkpoint(w, warps); });
    EXPECT_EQ(g.finish(), checkpoint_outcome::committed);
    EXPECT_EQ(g.latest_sequence(), round);
  }
  b.fill(0);
  test::run_lanes(3, [&](unsigned w) { ref.restore(w, 3); });
  EXPECT_EQ(g.finish(), checkpoint_outcome::restored);
  EXPECT_EQ(b.differing(3), 0u);
  // An operation not every warp took part in is reported, not waited for.
  test::run_lanes(2, [&](unsigned w) { ref.checkpoint(w, 3); });
  EXPECT_THROW(g.finish(), checkpoint_error);
}

TEST(Checkpoint, WarpstoreArrayAndDeviceBuffer) {
  test::scratch_file f("ckpt-test");
  test::pattern_file data(1 << 20);
  options ao = test_options();
  ao.writable = true;
  array<std::uint32_t> a(data.path(), 0, ao);
  const std::uint64_t n = a.size();
  buffers b({12345});
  b.fill(5);
  checkpoint_group g;
  g.add(a, "array");
  b.add_to(g);
  g.open(f.path, test_options());
  EXPECT_EQ(g.checkpoint(), 1u);
  // Scribble over both, through the array's cache and directly.
  const array_ref<std::uint32_t> r = a.ref();
  test::run_lanes(4, [&](unsigned l) {
    for (std::uint64_t i = l; i < n; i += 4) r.store(i, 0xDEADBEEFu);
  });
  a.flush();
  b.fill(6);
  const restore_result res = g.restore();
  ASSERT_TRUE(res.restored());
  EXPECT_EQ(b.differing(5), 0u);
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < n; ++i)
    bad += r[i] != static_cast<std::uint32_t>(tools::pattern_word(i * 4, 0) >> (i % 2 * 32));
  a.check();
  EXPECT_EQ(bad, 0u);
}

// A checkpointed array's byte view keeps every option of the array: derived
// from the array's own ref, not copied field by field (a copy once lost
// eager_write_back and overlapped_eviction silently).
TEST(Checkpoint, ArrayViewKeepsEveryOption) {
  test::scratch_file f("ckpt-view");
  test::pattern_file data(1 << 20);
  for (const bool on : {true, false}) {
    options ao = test_options();
    ao.writable = true;
    ao.eager_write_back = on;
    ao.overlapped_eviction = on;
    ao.bounds_check = !on;
    array<std::uint64_t> a(data.path(), 1000, ao);
    checkpoint_group g;
    g.add(a, "array");
    g.open(f.path, test_options());
    const checkpoint_buffer& b = g.ref().buffers[0];
    ASSERT_EQ(b.kind, checkpoint_buffer_kind::array);
    const array_ref<std::uint64_t> r = a.ref();
    EXPECT_EQ(b.array.eager_write_back, on);
    EXPECT_EQ(b.array.overlapped_eviction, on);
    EXPECT_EQ(b.array.bounds_check, !on);
    EXPECT_TRUE(b.array.writable);
    EXPECT_EQ(b.array.count, 1000u * sizeof(std::uint64_t));
    EXPECT_EQ(b.array.elems_per_line_log2, 12u);  // 4096 one-byte elements a line
    EXPECT_EQ(b.array.timeout_ns, r.timeout_ns);
    EXPECT_EQ(b.array.source, r.source);
    EXPECT_EQ(b.array.first_block, r.first_block);
    EXPECT_EQ(b.array.end_block, r.end_block);
    EXPECT_EQ(b.array.errors, r.errors);
  }
}

// Newest slot and its record, read from the file.
checkpoint_record newest_record(const std::string& path, int& slot) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  checkpoint_record best{};
  slot = -1;
  for (int s = 0; s < 2; ++s) {
    checkpoint_record r{};
    EXPECT_EQ(::pread(fd, &r, sizeof r, s * ckpt::record_stride), 512);
    if (r.magic_ok() && r.record_checksum == r.compute_checksum() && (slot < 0 || r.sequence > best.sequence)) {
      best = r;
      slot = s;
    }
  }
  ::close(fd);
  return best;
}

void poke(const std::string& path, std::uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  unsigned char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

TEST(Checkpoint, CorruptNewestDataFallsBackThenNextCheckpointReplacesIt) {
  test::scratch_file f("ckpt-test");
  buffers b({10000, 3});
  checkpoint_group g;
  open_and_commit_two(g, b, f.path);
  int slot = -1;
  const checkpoint_record rec = newest_record(f.path, slot);
  ASSERT_EQ(rec.sequence, 2u);
  poke(f.path, rec.data_offset + 9999);
  const restore_result r = g.restore();
  ASSERT_TRUE(r.restored());
  EXPECT_EQ(r.sequence, 1u);
  EXPECT_EQ(r.skipped, 1u);
  EXPECT_EQ(b.differing(1), 0u);
  // The next checkpoint takes the corrupt slot, never checkpoint 1's.
  b.fill(3);
  EXPECT_EQ(g.checkpoint(), 3u);
  int slot3 = -1;
  EXPECT_EQ(newest_record(f.path, slot3).sequence, 3u);
  EXPECT_EQ(slot3, slot);
  b.fill(0);
  EXPECT_EQ(g.restore().sequence, 3u);
  EXPECT_EQ(b.differing(3), 0u);
}

TEST(Checkpoint, NoDataVerifyingIsAnError) {
  test::scratch_file f("ckpt-test");
  buffers b({10000});
  checkpoint_group g;
  open_and_commit_two(g, b, f.path);
  const checkpoint_layout l = g.layout();
  poke(f.path, l.slot_offset[0] + 5);
  poke(f.path, l.slot_offset[1] + 5);
  try {
    g.restore();
    FAIL() << "restore succeeded with no data verifying";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint's data verifies"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, AnotherLayoutIsRefused) {
  test::scratch_file f("ckpt-test");
  {
    buffers b({10000});
    checkpoint_group g;
    b.add_to(g);
    g.open(f.path, test_options());
    g.checkpoint();
  }
  buffers other({10001});
  checkpoint_group g;
  other.add_to(g);
  try {
    g.open(f.path, test_options());
    FAIL() << "opened a file of another layout";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("another layout"), std::string::npos) << e.what();
  }
  checkpoint_group h;
  other.add_to(h);
  checkpoint_options co;
  co.discard_foreign = true;
  h.open(f.path, test_options(), nullptr, co);
  EXPECT_THROW(h.restore(), checkpoint_error);  // still nothing of ours to restore
  EXPECT_EQ(h.checkpoint(), 2u);                // the foreign record stays the older one
  EXPECT_TRUE(h.restore().restored());
}

TEST(Checkpoint, BadRegistrationsAreRefused) {
  checkpoint_group g;
  EXPECT_THROW(g.add(nullptr, 8, "null"), std::invalid_argument);
  auto m = runtime::make_device<std::byte>(64);
  EXPECT_THROW(g.add(m.get(), 0, "empty"), std::invalid_argument);
  EXPECT_THROW(g.add(m.get() + 1, 8, "unaligned"), std::invalid_argument);
  EXPECT_THROW(g.checkpoint(), std::logic_error);
  test::scratch_file f("ckpt-test");
  EXPECT_THROW(g.open(f.path, test_options()), std::invalid_argument);  // no buffers
}

}  // namespace
