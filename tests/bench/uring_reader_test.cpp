// CPU tests of the benchmarks' io_uring ceiling (bench/ceilings/uring_reader.h):
// random, sequential and Zipf reads of a pattern file, verified; wrong data
// detected; bad traces refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "bench/ceilings/uring_reader.h"
#include "support/args.h"
#include "support/pattern_file.h"
#include "support/trace.h"
#include "test_files.h"
#include "support/zipf.h"

namespace wb = warpstore::bench;

namespace {

using warpstore::test::temp_dir;

}  // namespace

// ---- io_uring ceiling --------------------------------------------------------------

namespace {
class UringReader : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_ / "uring.bin";
    warpstore::tools::write_pattern_file(path_, bytes_, 5, 2, {}, false);
  }
  wb::uring_reader_config config(std::uint32_t block) const {
    wb::uring_reader_config c;
    c.path = path_;
    c.threads = 2;
    c.queue_depth = 16;
    c.block_bytes = block;
    c.requests = 5000;
    c.trace = wb::trace::uniform(99, bytes_ / block);
    c.file_seed = 5;
    return c;
  }
  temp_dir dir_;
  std::string path_;
  std::uint64_t bytes_ = 8ull << 20;
};
}  // namespace

TEST_F(UringReader, RandomReadsVerify) {
  for (std::uint32_t block : {512u, 4096u, 65536u}) {
    const auto r = wb::run_uring_reader(config(block));
    EXPECT_EQ(r.errors, 0u) << r.first_error;
    EXPECT_EQ(r.mismatches, 0u);
    EXPECT_TRUE(r.verified);
    EXPECT_EQ(r.requests, 5000u);
    EXPECT_EQ(r.bytes, 5000ull * block);
    EXPECT_GT(r.iops, 0);
    EXPECT_GT(r.gbps, 0);
  }
}

TEST_F(UringReader, RoundsSequentialPlainReadsAndCustomAllocator) {
  auto c = config(4096);
  c.trace = wb::trace::sequential(bytes_ / 4096);
  c.arena_bytes = 300 * 4096;  // 5000 requests in 17 rounds
  c.fixed_buffers = false;
  int allocs = 0, frees = 0;
  c.alloc = [&](std::size_t n) {
    ++allocs;
    return std::aligned_alloc(4096, n);
  };
  c.release = [&](void* p) {
    ++frees;
    std::free(p);
  };
  const auto r = wb::run_uring_reader(c);
  EXPECT_EQ(r.rounds, 17u);
  EXPECT_FALSE(r.fixed_buffers);
  EXPECT_EQ(r.errors, 0u) << r.first_error;
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(frees, 1);
}

TEST_F(UringReader, DetectsWrongData) {
  auto c = config(4096);
  c.file_seed = 6;  // not the seed the file was written with
  const auto r = wb::run_uring_reader(c);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.mismatches, 5000ull * 512);
}

TEST_F(UringReader, ZipfIndicesAndDirectAuto) {
  auto c = config(4096);
  const wb::zipf_generator z(bytes_ / 4096, 0.99, 1);
  const auto idx = z.indices(c.requests);
  c.trace = wb::trace::indexed(idx.data(), bytes_ / 4096);
  c.direct = wb::direct_mode::automatic;  // tmpfs has no O_DIRECT: falls back
  const auto r = wb::run_uring_reader(c);
  EXPECT_EQ(r.errors, 0u) << r.first_error;
  EXPECT_EQ(r.mismatches, 0u);
}

TEST_F(UringReader, RejectsTraceBeyondFile) {
  auto c = config(4096);
  c.trace = wb::trace::uniform(1, bytes_ / 4096 + 1);
  EXPECT_THROW(wb::run_uring_reader(c), std::invalid_argument);
  c = config(1000);
  EXPECT_THROW(wb::run_uring_reader(c), std::invalid_argument);
}

TEST(DirectMode, Parse) {
  EXPECT_EQ(wb::parse_direct_mode("auto"), wb::direct_mode::automatic);
  EXPECT_STREQ(wb::to_string(wb::direct_mode::on), "on");
  EXPECT_THROW(wb::parse_direct_mode("yes"), wb::usage_error);
}
