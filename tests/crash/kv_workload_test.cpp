// The key-value crash workload on the CPU target: prepare + run + recover
// finds the last state with every byte right; a batch cut short at each
// point of the protocol is undone; recovery stopped after any step and run
// again still ends in the right state; GETs see what was SET.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "apps/kvstore/launch.h"
#include "tests/cpu/test_files.h"
#include "tests/crash/kv_workload.h"

using namespace warpstore;
using namespace warpstore::crash;

namespace {

class KvWorkload : public ::testing::TestWithParam<controller_kind> {
 protected:
  void SetUp() override {
    env_.dir = dir_.path;
    env_.opts.controller = GetParam();
    env_.opts.cache_bytes = 256 << 10;  // smaller than the 576 KiB table: write-back on eviction
    env_.opts.ways = 4;
    env_.opts.service_threads = 2;
    env_.opts.queue_pairs = 2;
    env_.opts.queue_depth = 32;
    env_.opts.direct = direct_io::off;
    env_.opts.writable = true;
    env_.opts.timeout_ns = 20'000'000'000ull;
    env_.open = [](const std::string& p, const options& o) { return make_controller(p, o); };
    env_.seed = 7;
  }
  test::temp_dir dir_{"kv"};
  env env_;
};

}  // namespace

TEST_P(KvWorkload, PrepareRunRecoverFindsTheLastState) {
  auto w = make_kv_workload();
  w->prepare(env_);
  std::vector<std::uint64_t> acked;
  w->run(env_, 6, [&](std::uint64_t k) { acked.push_back(k); });
  EXPECT_EQ(acked, (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6}));
  const verdict v = w->recover(env_);
  EXPECT_EQ(v.mismatches, 0u) << v.detail;
  EXPECT_EQ(v.state, 6u);
  // Run again: it goes on from the committed state.
  w->run(env_, 8, [&](std::uint64_t k) { acked.push_back(k); });
  EXPECT_EQ(acked.back(), 8u);
  const verdict again = w->recover(env_);
  EXPECT_EQ(again.mismatches, 0u) << again.detail;
  EXPECT_EQ(again.state, 8u);
}

TEST_P(KvWorkload, BatchCutShortAnywhereIsUndone) {
  const kv::crash_point points[] = {kv::crash_point::after_log, kv::crash_point::after_apply,
                                    kv::crash_point::after_data_flush};
  auto w = make_kv_workload();
  w->prepare(env_);
  std::uint64_t state = 0;
  for (const kv::crash_point p : points) {
    SCOPED_TRACE(static_cast<int>(p));
    w->run(env_, state + 2, [](std::uint64_t) {});
    state += 2;
    kv_cut_batch(env_, p);
    const verdict v = w->recover(env_);
    EXPECT_EQ(v.mismatches, 0u) << v.detail;
    EXPECT_EQ(v.state, state);
  }
}

TEST_P(KvWorkload, InterruptedRecoveryRerunEndsInTheCommittedState) {
  const durable::recovery_step steps[] = {durable::recovery_step::scanned,
                                          durable::recovery_step::undo_written,
                                          durable::recovery_step::undo_durable,
                                          durable::recovery_step::superblock_written};
  auto w = make_kv_workload();
  w->prepare(env_);
  w->run(env_, 3, [](std::uint64_t) {});
  for (const durable::recovery_step step : steps) {
    SCOPED_TRACE(static_cast<int>(step));
    kv_cut_batch(env_, kv::crash_point::after_data_flush);
    {
      auto data = env_.open(kv_data_path(env_), env_.opts);
      durable::write_ahead_log log(env_.open(kv_log_path(env_), env_.opts), env_.opts);
      durable::recovery_hooks h;
      h.stop_after = step;
      const durable::recovery_report rep = log.recover(data.get(), h);
      EXPECT_FALSE(rep.completed);
      EXPECT_EQ(rep.partial_txns, 1u);
    }
    const verdict v = w->recover(env_);
    EXPECT_EQ(v.mismatches, 0u) << v.detail;
    EXPECT_EQ(v.state, 3u);
  }
}

TEST_P(KvWorkload, GetsSeeSets) {
  auto w = make_kv_workload();
  w->prepare(env_);
  w->run(env_, 4, [](std::uint64_t) {});
  kv::basic_store<kv::cpu_launch> s(kv_data_path(env_), kv_log_path(env_), env_.opts, env_.open);
  EXPECT_EQ(s.batches(), 4u);
  EXPECT_EQ(s.recovery().partial_txns, 0u);
  // Expected values: the last batch that set each key.
  std::vector<std::uint64_t> keys(kv_shape::universe);
  std::vector<kv::value> want(kv_shape::universe);
  std::vector<std::uint8_t> set(kv_shape::universe, 0);
  for (std::uint64_t k = 1; k <= 4; ++k) {
    std::vector<std::uint64_t> bk;
    std::vector<kv::value> bv;
    kv_batch(env_.seed, k, bk, bv);
    for (std::size_t i = 0; i < bk.size(); ++i) {
      want[bk[i] - 1] = bv[i];
      set[bk[i] - 1] = 1;
    }
  }
  for (std::uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  std::vector<kv::value> got;
  std::vector<std::uint8_t> found;
  s.get(keys, got, found);
  std::uint64_t bad = 0, present = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    bad += found[i] != set[i];
    present += found[i];
    if (found[i] && set[i]) bad += std::memcmp(&got[i], &want[i], sizeof want[i]) != 0;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(present, 400u);
  // A SET in this session, with a repeated key (the last one wins) and key 0 refused.
  std::vector<std::uint64_t> k2{5000, 5001, 5000};
  std::vector<kv::value> v2(3);
  v2[0].w[0] = 1;
  v2[1].w[0] = 2;
  v2[2].w[0] = 3;
  const std::vector<kv::set_result> r = s.set(k2, v2);
  EXPECT_EQ(r[0], kv::set_result::inserted);
  s.get({5000, 5001, 4999}, got, found);
  EXPECT_EQ(found, (std::vector<std::uint8_t>{1, 1, 0}));
  EXPECT_EQ(got[0].w[0], 3u);
  EXPECT_EQ(got[1].w[0], 2u);
  EXPECT_THROW(s.set({0}, std::vector<kv::value>(1)), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Controllers, KvWorkload,
                         ::testing::Values(controller_kind::host, controller_kind::memory,
                                           controller_kind::nvme_model),
                         [](const ::testing::TestParamInfo<controller_kind>& i) {
                           return i.param == controller_kind::nvme_model
                                      ? std::string("nvme_model")
                                      : std::string(to_string(i.param));
                         });
