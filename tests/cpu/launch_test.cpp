// run_warps on the CPU target (warpstore/launch.cuh): every warp of [0, n)
// runs once with the n returned, on its own thread, n at most cpu_warps();
// a body that throws stops no other, and its exception reaches the caller
// once every thread is joined.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "warpstore/error.h"
#include "warpstore/launch.cuh"

using namespace warpstore;

namespace {

// What each warp of one launch saw.
struct calls {
  std::mutex m;
  std::vector<std::uint64_t> warps;  // the warp of every call
  std::set<std::uint64_t> ns;        // every n a call was given
  std::set<std::thread::id> threads;

  void record(std::uint64_t w, std::uint64_t n) {
    const std::lock_guard<std::mutex> lock(m);
    warps.push_back(w);
    ns.insert(n);
    threads.insert(std::this_thread::get_id());
  }
};

TEST(RunWarps, CpuWarpsIsTheHardwareClampedToTwoAndEight) {
  EXPECT_EQ(cpu_warps(), std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
  EXPECT_EQ(lanes_per_warp, 1u);
  EXPECT_EQ(detail::warp::whole, 1u);
}

TEST(RunWarps, EveryWarpOnceWithTheNReturned) {
  const std::uint64_t most = cpu_warps();
  for (const std::uint64_t asked :
       {std::uint64_t{1}, std::uint64_t{2}, most - 1, most, most + 1, std::uint64_t{1000}}) {
    calls c;
    const std::uint64_t n =
        run_warps(asked, [&c](std::uint64_t w, std::uint64_t n) { c.record(w, n); });
    EXPECT_EQ(n, std::min(asked, most)) << "asked " << asked;
    std::sort(c.warps.begin(), c.warps.end());
    std::vector<std::uint64_t> want(n);
    for (std::uint64_t w = 0; w < n; ++w) want[w] = w;
    EXPECT_EQ(c.warps, want) << "asked " << asked;
    EXPECT_EQ(c.ns, std::set<std::uint64_t>{n}) << "asked " << asked;
    // A thread per warp, none of them the caller's.
    EXPECT_EQ(c.threads.size(), n) << "asked " << asked;
    EXPECT_EQ(c.threads.count(std::this_thread::get_id()), 0u);
  }
}

TEST(RunWarps, ARegisterCapChangesNothingOnTheCpu) {
  // run_warps<R> caps a GPU kernel's registers; the CPU form runs the same
  // threads as without it.
  calls c;
  const std::uint64_t n =
      run_warps<64>(5, [&c](std::uint64_t w, std::uint64_t n) { c.record(w, n); });
  EXPECT_EQ(n, std::min<std::uint64_t>(5, cpu_warps()));
  std::sort(c.warps.begin(), c.warps.end());
  std::vector<std::uint64_t> want(n);
  for (std::uint64_t w = 0; w < n; ++w) want[w] = w;
  EXPECT_EQ(c.warps, want);
  EXPECT_EQ(c.ns, std::set<std::uint64_t>{n});
}

TEST(RunWarps, ZeroWarpsMeansCpuWarps) {
  calls c;
  const std::uint64_t n = run_warps(0, [&c](std::uint64_t w, std::uint64_t n) { c.record(w, n); });
  EXPECT_EQ(n, cpu_warps());
  EXPECT_EQ(c.warps.size(), n);
  EXPECT_EQ(c.ns, std::set<std::uint64_t>{n});
}

TEST(RunWarps, BodiesStrideOverN) {
  // The shape every body has: items w, w + n, ... of a list longer than n.
  std::vector<std::atomic<int>> seen(1001);
  const std::uint64_t n = run_warps(64, [&seen](std::uint64_t w, std::uint64_t n) {
    for (std::uint64_t i = w; i < seen.size(); i += n) seen[i].fetch_add(1);
  });
  EXPECT_EQ(n, std::min<std::uint64_t>(64, cpu_warps()));
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

TEST(RunWarps, AThrowingBodyStopsNoOtherAndIsRethrownAfterAllJoined) {
  const std::uint64_t most = cpu_warps();
  std::vector<std::atomic<int>> finished(most);
  try {
    run_warps(most, [&finished](std::uint64_t w, std::uint64_t) {
      if (w == 0) throw std::out_of_range("warp 0 gives up");
      // The others are still at work when warp 0 throws.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      finished[w].store(1);
    });
    FAIL() << "the body's exception was not rethrown";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "warp 0 gives up");
  }
  // Every other warp ran to its end before run_warps returned.
  EXPECT_EQ(finished[0].load(), 0);
  for (std::uint64_t w = 1; w < most; ++w) EXPECT_EQ(finished[w].load(), 1) << "warp " << w;
}

TEST(RunWarps, OnlyTheFirstOfSeveralExceptionsIsRethrown) {
  std::atomic<int> ran{0};
  EXPECT_THROW(run_warps(0,
                         [&ran](std::uint64_t w, std::uint64_t) {
                           ran.fetch_add(1);
                           throw std::runtime_error("warp " + std::to_string(w));
                         }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), static_cast<int>(cpu_warps()));
}

TEST(RunWarps, BlockThreadsMustBeWholeWarps) {
  std::atomic<int> ran{0};
  const auto body = [&ran](std::uint64_t, std::uint64_t) { ran.fetch_add(1); };
  for (const unsigned bad : {0u, 1u, 33u, 100u}) {
    EXPECT_THROW(run_warps(4, body, bad), std::invalid_argument) << bad;
    EXPECT_THROW(run_warps(4, body, bad), warpstore::invalid_argument) << bad;
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(run_warps(1, body, 32), 1u);
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
