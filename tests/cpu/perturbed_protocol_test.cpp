// The queue and cache protocol under perturbation: this test links a build of
// the CPU target in which every atomic step (device_atomic, system_atomic)
// first calls perturb_atomic_step() below. Each seed makes the lanes and the
// host controller's service threads yield or sleep at random points, so
// orders of events a quiet machine never produces are tried; every read is
// verified and nothing may time out.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "test_files.h"
#include "warpstore/array.cuh"

namespace {

std::atomic<std::uint64_t> g_seed{1};
std::atomic<std::uint64_t> g_steps{0};
std::atomic<unsigned> g_next_thread{0};

}  // namespace

namespace warpstore::detail {

// One in 8 steps yields, one in 128 sleeps 1 to 64 microseconds.
void perturb_atomic_step() {
  thread_local std::uint64_t epoch = 0;
  thread_local test::lane_rng rng{0};
  const std::uint64_t seed = g_seed.load(std::memory_order_relaxed);
  if (epoch != seed) {
    epoch = seed;
    rng.s = seed * 0x9E3779B97F4A7C15ull + g_next_thread.fetch_add(1, std::memory_order_relaxed);
  }
  g_steps.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t r = rng.next();
  if ((r & 127) == 0)
    std::this_thread::sleep_for(std::chrono::microseconds(1 + ((r >> 7) & 63)));
  else if ((r & 7) == 0)
    std::this_thread::yield();
}

}  // namespace warpstore::detail

using namespace warpstore;

namespace {

unsigned seeds() {
  const char* v = std::getenv("WARPSTORE_PERTURB_SEEDS");
  return v && *v ? static_cast<unsigned>(std::stoul(v)) : 32u;
}

options perturbed_options(controller_kind kind) {
  options o;
  o.controller = kind;
  o.cache_bytes = 32 << 10;  // 8 lines of 4 KiB for a 2 MiB file: constant eviction
  o.line_size = 4096;
  o.ways = 4;
  o.service_threads = 2;
  o.queue_pairs = 2;
  o.queue_depth = 4;  // small: slot reuse, full SQ and full CQ all happen
  o.uring_depth = 4;
  o.direct = direct_io::off;
  o.timeout_ns = 60'000'000'000ull;  // any expiry is a protocol bug, not slowness
  return o;
}

// Lanes mix element reads, pinned lines and spans; returns wrong values.
std::uint64_t mixed_reads(const array_ref<std::uint64_t>& ref, unsigned lanes, unsigned reads,
                          std::uint64_t seed) {
  std::atomic<std::uint64_t> wrong{0};
  test::run_lanes(lanes, [&](unsigned lane) {
    test::lane_rng rng{seed * 131 + lane};
    std::uint64_t span[16];
    for (unsigned n = 0; n < reads; ++n) {
      const std::uint64_t i = rng.next() % (ref.size() - 16);
      switch (n % 3) {
        case 0:
          wrong += ref[i] != tools::pattern_word(i * 8);
          break;
        case 1: {
          pinned_line<std::uint64_t> p = ref.pin(i);
          wrong += !p.valid() || p[i] != tools::pattern_word(i * 8);
          p.release();
          break;
        }
        default:
          wrong += !ref.read_span(i, 16, span);
          for (unsigned k = 0; k < 16; ++k) wrong += span[k] != tools::pattern_word((i + k) * 8);
      }
    }
  });
  return wrong.load();
}

class PerturbedProtocol : public ::testing::TestWithParam<controller_kind> {};

}  // namespace

TEST_P(PerturbedProtocol, EverySeedReadsRightAndNeverTimesOut) {
  test::pattern_file file(2 << 20);
  const unsigned n = seeds();
  for (unsigned s = 1; s <= n; ++s) {
    g_seed.store(s);
    array<std::uint64_t> a(file.path(), 0, perturbed_options(GetParam()));
    ASSERT_EQ(mixed_reads(a.ref(), 6, 200, s), 0u) << "seed " << s;
    ASSERT_NO_THROW(a.check()) << "seed " << s;
    EXPECT_EQ(a.stats().errors, 0u) << "seed " << s;
  }
  std::printf("perturbed protocol: %u seeds, %llu atomic steps perturbed\n", n,
              static_cast<unsigned long long>(g_steps.load()));
  EXPECT_GT(g_steps.load(), 0u);  // the hook is really in the build
}

INSTANTIATE_TEST_SUITE_P(Controllers, PerturbedProtocol,
                         ::testing::Values(controller_kind::host, controller_kind::memory),
                         [](const auto& info) { return std::string(to_string(info.param)); });
