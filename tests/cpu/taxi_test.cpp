// The taxi table (support/taxi/taxi.h) and queries Q0..Q5 on the CPU target
// (apps/taxi/query.cuh), through warpstore arrays and plain columns, checked
// against the CPU answers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "apps/graph/launch.h"
#include "apps/taxi/query.cuh"
#include "support/graph/csr.h"
#include "support/taxi/taxi.h"
#include "warpstore/array.cuh"

using namespace warpstore;

namespace {

class TaxiTable : public ::testing::Test {
 protected:
  static constexpr std::uint64_t rows = 3 * taxi::rows_per_zone + 1000;  // a partial last line
  void SetUp() override {
    const char* dir = std::getenv("TMPDIR");
    dir_ = std::string(dir ? dir : "/tmp") + "/warpstore-taxi-" + std::to_string(::getpid());
    taxi::write_table(dir_, rows, 7, taxi::layout::zone, 4);
    cols_.assign(taxi::columns.size(), std::vector<float>(rows));
    for (unsigned c = 0; c < cols_.size(); ++c)
      graph::read_file_range(taxi::column_path(dir_, c), 0, rows * 4, cols_[c].data(), 2);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::vector<std::vector<float>> cols_;
};

}  // namespace

TEST_F(TaxiTable, FilesHoldTheGenerator) {
  EXPECT_EQ(taxi::table_rows(dir_), rows);
  for (std::uint64_t r : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{65535}, std::uint64_t{65536}, rows - 1}) {
    const taxi::trip t = taxi::make_trip(r, 7, taxi::layout::zone);
    for (unsigned c = 0; c < cols_.size(); ++c) EXPECT_EQ(cols_[c][r], t.column(c)) << r << " " << c;
  }
  for (std::uint64_t r = 0; r < rows; r += 997) {
    EXPECT_GT(cols_[0][r], 0.0f);
    EXPECT_LE(cols_[0][r], 30.0f);
    EXPECT_GE(cols_[1][r], 3.0f);  // fare
  }
}

TEST(TaxiLayout, ZoneClustersLongTripsShuffledScattersThem) {
  // Long trips (> 12 miles) only come from airport zones: in the zone layout
  // they fill whole runs of rows, in the shuffled one they are everywhere.
  const std::uint64_t n = 64 * taxi::rows_per_zone;
  auto lines_with_long_trips = [&](taxi::layout l) {
    std::uint64_t lines = 0, total = 0;
    for (std::uint64_t line = 0; line < n / 1024; line += 7, ++total) {
      bool any = false;
      for (std::uint64_t r = line * 1024; r < (line + 1) * 1024 && !any; ++r)
        any = taxi::make_trip(r, 1, l).distance > 12.0f;
      lines += any;
    }
    return static_cast<double>(lines) / static_cast<double>(total);
  };
  EXPECT_LT(lines_with_long_trips(taxi::layout::zone), 0.1);
  EXPECT_GT(lines_with_long_trips(taxi::layout::shuffled), 0.9);
}

// The benchmark's check (apps/taxi/taxi_bench.cu): every side's answer
// equals the CPU's exactly, field by field.
void expect_same(const taxi::answer& got, const taxi::answer& want, const char* side,
                 const std::string& what = "") {
  SCOPED_TRACE(side);
  EXPECT_EQ(taxi::differences(got, want), "") << what;
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.sum_distance, want.sum_distance) << what;
  EXPECT_EQ(got.sum_ratio, want.sum_ratio) << what;
}

taxi::answer answer_of(const std::uint64_t (&sums)[apps::query_sums]) {
  EXPECT_EQ(sums[3], 0u) << "chunks not read";
  taxi::answer a;
  a.count = sums[0];
  a.sum_distance = sums[1];
  a.sum_ratio = sums[2];
  return a;
}

TEST(TaxiAnswer, SumsAreExactAndDifferencesNamed) {
  // Integer terms: the sum does not depend on the order it is taken in.
  std::vector<float> d = {0.31f, 29.99f, 12.5f, 7.77f, 0.3f};
  std::uint64_t forward = 0, backward = 0;
  for (float x : d) forward += taxi::distance_term(x);
  for (auto it = d.rbegin(); it != d.rend(); ++it) backward += taxi::distance_term(*it);
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(taxi::distance_term(12.5f), 12.5 * taxi::fixed_one);
  EXPECT_EQ(taxi::ratio_term(25.0, 12.5f), 2 * taxi::fixed_one);
  taxi::answer a, b;
  a.count = b.count = 3;
  a.sum_ratio = 5;
  EXPECT_EQ(taxi::differences(a, a), "");
  const std::string diff = taxi::differences(a, b);
  EXPECT_NE(diff.find("sum_ratio got 5 want 0"), std::string::npos) << diff;
  EXPECT_EQ(diff.find("count"), std::string::npos) << diff;
}

// What both query tests use: the host controller over the page cache, small
// queues, and controllers opened once per column (as the benchmark).
options query_options(std::uint32_t line) {
  options o;
  // A quarter of the table (4.7 MB). Each lane keeps its distance line
  // pinned while it reads the other columns: with 16 ways no set can fill
  // with pins.
  o.cache_bytes = 1 << 20;
  o.line_size = line;
  o.ways = 16;
  o.service_threads = 1;
  o.queue_pairs = 2;
  o.queue_depth = 16;
  o.direct = direct_io::off;
  o.timeout_ns = 30'000'000'000ull;
  return o;
}

// Q0..Q5 through warpstore and through plain columns on the CPU target,
// checked as the benchmark checks them; lines of 4 KiB (a chunk per line)
// and of 16 KiB (several chunks per line, as the benchmark's 64 KiB lines).
TEST_F(TaxiTable, QueriesThroughWarpstoreMatchTheCpu) {
  for (std::uint32_t line : {4096u, 16384u}) {
    const options o = query_options(line);
    // As the benchmark: controllers opened once, a fresh cache and arrays
    // over columns 0..k per query.
    std::vector<std::shared_ptr<controller>> ctls;
    apps::taxi_query<apps::plain_column> plain{};
    for (unsigned col = 0; col < taxi::columns.size(); ++col) {
      ctls.push_back(make_controller(taxi::column_path(dir_, col), o));
      plain.cols[col].data = cols_[col].data();
    }
    apps::cpu_launch launch{8};
    // The further-read variants of warpstore-taxi --further-read (converged:
    // read_masked by every lane; released: selected rows collected, column-0
    // line unpinned first) on Q5 with 4 KiB lines.
    for (apps::further_read mode : {apps::further_read::divergent, apps::further_read::converged,
                                    apps::further_read::released})
    for (unsigned k = 0; k <= 5; ++k)
      for (double sel : {0.005, 0.3}) {
        if (mode != apps::further_read::divergent && (k != 5 || line != 4096)) continue;
        const float threshold = taxi::threshold_for(cols_[0], sel);
        const taxi::answer want = taxi::cpu_query(cols_, k, threshold, 3);
        ASSERT_GT(want.count, 0u);
        EXPECT_EQ(want.sum_ratio == 0, k == 0);
        char what_buf[64];
        std::snprintf(what_buf, sizeof what_buf, "Q%u sel %g line %u mode %u", k, sel, line,
                      static_cast<unsigned>(mode));
        const std::string what = what_buf;
        // The CPU reference itself does not depend on how it is split.
        expect_same(taxi::cpu_query(cols_, k, threshold, 1), want, "cpu, one thread", what);
        auto c = std::make_shared<cache>(o);
        std::vector<std::unique_ptr<array<float>>> arrays;
        apps::taxi_query<apps::store_column> q{};
        for (unsigned col = 0; col <= k; ++col) {
          arrays.push_back(std::make_unique<array<float>>(c, ctls[col], rows, 0, o));
          q.cols[col].data = arrays.back()->ref();
        }
        std::uint64_t sums[apps::query_sums] = {};
        q.k = k, q.threshold = threshold, q.rows = rows, q.chunk = 1024, q.sums = sums;
        q.mode = mode;
        launch(q);
        for (auto& a : arrays) a->check();
        for (auto& ctl : ctls) ctl->check();
        expect_same(answer_of(sums), want, "warpstore", what);
        if (sel > 0.1 && k >= 1) {  // two columns are more than the cache
          EXPECT_GT(c->stats().evictions, 0u) << what;
        }
        std::fill(std::begin(sums), std::end(sums), 0);
        plain.k = k, plain.threshold = threshold, plain.rows = rows, plain.chunk = 1000, plain.sums = sums;
        plain.mode = mode;
        launch(plain);
        expect_same(answer_of(sums), want, "plain", what);
      }
  }
}

