// The power-cut layer (src/controller/powercut.h): what a FLUSH completed
// survives any cut; what was written after it survives or not, block by
// block; after power_off() every command fails and no FLUSH is acknowledged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "controller/host_controller.h"
#include "controller/powercut.h"
#include "test_files.h"
#include "warpstore/array.cuh"

using namespace warpstore;

namespace {

constexpr std::uint64_t bytes = 1 << 20;

options cut_options() {
  options o = test::small_cache_options(64 << 10);
  o.writable = true;
  o.timeout_ns = 10'000'000'000ull;
  return o;
}

std::vector<std::uint64_t> read_words(const std::string& path) {
  std::vector<std::uint64_t> w(bytes / 8);
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, w.data(), bytes, 0), static_cast<ssize_t>(bytes));
  ::close(fd);
  return w;
}

// Writes value v to every word with one lane per 1/4 of the array, then flushes
// when `flush` (an array flush: write-back, FLUSH through the queues, fdatasync).
void store_all(const array<std::uint64_t>& a, std::uint64_t v, bool flush_after) {
  const array_ref<std::uint64_t> ref = a.ref();
  test::run_lanes(4, [&](unsigned lane) {
    for (std::uint64_t i = lane; i < ref.size(); i += 4) ref.store(i, v + i);
  });
  if (flush_after) const_cast<array<std::uint64_t>&>(a).flush();
}

struct rig {
  test::pattern_file file{bytes};
  std::shared_ptr<backing_file> backing;
  std::shared_ptr<powercut_layer> layer;
  rig() {
    backing = std::make_shared<backing_file>(file.path(), direct_io::off, file_access::read_write);
    layer = std::make_shared<powercut_layer>(backing);
  }
  std::unique_ptr<array<std::uint64_t>> open() {
    const options o = cut_options();
    auto ctl = std::make_shared<host_controller>(backing, o, o.line_size, layer);
    return std::make_unique<array<std::uint64_t>>(std::make_shared<cache>(o), ctl, 0, 0, o);
  }
};

}  // namespace

TEST(Powercut, LosingEverythingKeepsExactlyTheLastFlush) {
  rig r;
  {
    auto a = r.open();
    store_all(*a, 1000, true);
    EXPECT_EQ(r.layer->volatile_blocks(), 0u);
    store_all(*a, 5000, false);
    // Write the dirty lines back (WRITEs through the queues) without FLUSH:
    // evictions of a full pass over a cache of 1/16 of the file did most.
    r.layer->power_off();
    EXPECT_THROW(a->flush(), std::exception);  // no FLUSH is acknowledged after the cut
    a.reset();                                  // the destructor's best-effort flush fails quietly
  }
  const auto cut = r.layer->cut(7, 1.0);
  EXPECT_GT(cut.volatile_blocks, 0u);
  EXPECT_EQ(cut.reverted, cut.volatile_blocks);
  const auto words = read_words(r.file.path());
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < words.size(); ++i) {
    if (words[i] != 1000 + i && bad < 4)
      ADD_FAILURE() << "word " << i << " holds " << words[i] << ", not " << 1000 + i;
    bad += words[i] != 1000 + i;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(Powercut, LosingNothingKeepsEveryFinishedWrite) {
  rig r;
  std::uint64_t volatile_blocks = 0;
  {
    auto a = r.open();
    store_all(*a, 1000, true);
    store_all(*a, 5000, false);
    a->flush();  // durable: nothing volatile is left
    EXPECT_EQ(r.layer->volatile_blocks(), 0u);
    store_all(*a, 9000, false);
    volatile_blocks = r.layer->volatile_blocks();
    r.layer->power_off();
    a.reset();
  }
  EXPECT_GT(volatile_blocks, 0u);
  const auto cut = r.layer->cut(7, 0.0);
  EXPECT_EQ(cut.reverted, 0u);
  // Every word is either the flushed 5000 + i or a written-back 9000 + i
  // (lines still dirty in the cache at the cut never reached the drive).
  const auto words = read_words(r.file.path());
  std::uint64_t newer = 0, bad = 0;
  for (std::uint64_t i = 0; i < words.size(); ++i) {
    if (words[i] == 9000 + i)
      ++newer;
    else
      bad += words[i] != 5000 + i;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(newer, 0u);
}

TEST(Powercut, RandomLossTearsBlocksButNeverGoesBehindTheFlush) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    rig r;
    {
      auto a = r.open();
      store_all(*a, 1000, true);
      store_all(*a, 5000, false);  // written back in part, not flushed
      store_all(*a, 9000, false);
      r.layer->power_off();
      a.reset();
    }
    const auto cut = r.layer->cut(seed, 0.5);
    EXPECT_GT(cut.reverted, 0u);
    EXPECT_LT(cut.reverted, cut.volatile_blocks);
    const auto words = read_words(r.file.path());
    std::uint64_t bad = 0;
    for (std::uint64_t i = 0; i < words.size(); ++i)
      bad += words[i] != 1000 + i && words[i] != 5000 + i && words[i] != 9000 + i;
    EXPECT_EQ(bad, 0u) << "seed " << seed;
  }
}

TEST(Powercut, CutBeforePowerOffIsRefused) {
  rig r;
  EXPECT_THROW(r.layer->cut(1, 1.0), std::exception);
}

TEST(Powercut, AfterPowerOffEveryCommandFailsPromptly) {
  rig r;
  auto a = r.open();
  store_all(*a, 1000, true);
  r.layer->power_off();
  const auto start = std::chrono::steady_clock::now();
  const array_ref<std::uint64_t> ref = a->ref();
  // Reads of lines not cached and stores that evict dirty lines: each fails
  // with an error status, none waits for its deadline.
  test::run_lanes(4, [&](unsigned lane) {
    for (std::uint64_t i = lane * 512; i < ref.size(); i += 4 * 512) {
      (void)ref[i];
      ref.store(i + 1, 7);
    }
  });
  EXPECT_THROW(a->check(), std::exception);
  EXPECT_THROW(a->flush(), std::exception);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Powercut, PowerOffAtRandomInstantsNeverHangs) {
  for (int trial = 0; trial < 12; ++trial) {
    rig r;
    options o = cut_options();
    o.service_threads = 1;
    o.queue_pairs = 1;
    o.queue_depth = 256;
    auto ctl = std::make_shared<host_controller>(r.backing, o, o.line_size, r.layer);
    array<std::uint64_t> a(std::make_shared<cache>(o), ctl, 0, 0, o);
    const array_ref<std::uint64_t> ref = a.ref();
    const auto start = std::chrono::steady_clock::now();
    std::thread cutter([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(1000 + trial * 3000));
      r.layer->power_off();
    });
    try {
      for (int pass = 0; pass < 20; ++pass) {
        // A store that fails costs a round trip to the service thread; on a
        // loaded 2-core machine that is a scheduler slice, so stop at the
        // first failure (check() raises it) rather than failing every store.
        for (std::uint64_t i = 0; i < ref.size(); ++i) {
          ref.store(i, pass);
          if (i % 64 == 63) a.check();
        }
        a.check();
        a.flush();
      }
    } catch (const std::exception&) {
    }
    cutter.join();
    // A hang would be unbounded (or end at the 10 s deadline per access);
    // unloaded, a trial takes well under 0.1 s.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8)) << "trial " << trial;
  }
}
