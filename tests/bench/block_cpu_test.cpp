// The body of `warpstore-bench block` (block_io.h) on the CPU target:
// std::threads stand in for GPU threads, against the real host and memory
// controllers, and every slot is verified the way the GPU run verifies it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/block_io.h"
#include "support/pattern_file.h"
#include "support/trace.h"
#include "support/zipf.h"
#include "warpstore/controller.h"
#include "warpstore/error.h"

namespace wb = warpstore::bench;
using namespace warpstore;

namespace {

class BlockCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    path_ = std::string(base ? base : "/tmp") + "/warpstore-block-cpu-" + std::to_string(::getpid());
    tools::write_pattern_file(path_, file_bytes_, seed_, 2, {}, false);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  options opts(controller_kind kind, std::uint32_t request) const {
    options o = options::from_environment();
    o.controller = kind;
    o.service_threads = 2;
    o.queue_pairs = 2;
    o.queue_depth = 16;
    o.line_size = request;
    o.timeout_ns = 20'000'000'000ull;
    return o;
  }

  // Runs `threads` lanes of block_thread for `rounds` reads each (in two
  // launches, as rounds do), verifies every slot; returns the mismatching words.
  std::uint64_t run(const io_ref& io, const wb::trace& tr, std::uint64_t threads,
                    std::uint32_t rounds, std::uint32_t request, error_record& errors) {
    std::vector<std::byte> dst(threads * rounds * request);
    std::uint64_t bad = 0;
    const std::uint32_t first = rounds / 2;
    for (const auto& [r0, n] : {std::pair<std::uint32_t, std::uint32_t>{0, first},
                                std::pair<std::uint32_t, std::uint32_t>{first, rounds - first}}) {
      std::fill(dst.begin(), dst.end(), std::byte{0xFF});
      std::vector<std::thread> lanes;
      for (std::uint64_t tid = 0; tid < threads + 3; ++tid)  // 3 lanes past the end: no requests
        lanes.emplace_back([&, tid, r0 = r0, n = n] {
          wb::block_thread(io, tr, 1u, threads, tid, r0, n, request, dst.data(), &errors);
        });
      for (auto& l : lanes) l.join();
      for (std::uint64_t k = 0; k < threads * n; ++k)
        bad += tools::count_mismatches(dst.data() + k * request,
                                       tr.index(r0 * threads + k) * request, request, seed_);
    }
    return bad;
  }

  std::string path_;
  std::uint64_t file_bytes_ = 4ull << 20;
  std::uint64_t seed_ = 17;
};

}  // namespace

TEST_F(BlockCpu, HostControllerRandomAndZipfVerify) {
  for (std::uint32_t request : {512u, 4096u}) {
    auto ctrl = make_controller(path_, opts(controller_kind::host, request));
    const std::uint64_t blocks = file_bytes_ / request;
    error_record errors{};
    EXPECT_EQ(run(ctrl->device_ref(), wb::trace::uniform(5, blocks), 24, 6, request, errors), 0u);
    const auto zipf = wb::zipf_generator(blocks, 0.99, 5).indices(24 * 6);
    EXPECT_EQ(run(ctrl->device_ref(), wb::trace::indexed(zipf.data(), blocks), 24, 6, request, errors), 0u);
    EXPECT_EQ(run(ctrl->device_ref(), wb::trace::sequential(blocks), 24, 6, request, errors), 0u);
    EXPECT_EQ(errors.count, 0u);
    ctrl->check();
    EXPECT_GE(ctrl->stats().commands, 3u * 24 * 6);
  }
}

TEST_F(BlockCpu, MemoryControllerVerifies) {
  auto ctrl = make_controller(path_, opts(controller_kind::memory, 4096));
  error_record errors{};
  EXPECT_EQ(run(ctrl->device_ref(), wb::trace::uniform(9, file_bytes_ / 4096), 16, 4, 4096, errors), 0u);
  EXPECT_EQ(errors.count, 0u);
}

TEST_F(BlockCpu, ReadsPastTheEndAreRecordedErrors) {
  auto ctrl = make_controller(path_, opts(controller_kind::host, 4096));
  error_record errors{};
  // Twice the file's blocks: about half the reads are out of range.
  run(ctrl->device_ref(), wb::trace::uniform(3, 2 * file_bytes_ / 4096), 8, 4, 4096, errors);
  EXPECT_GT(errors.count, 0u);
  EXPECT_EQ(errors.state, 2u);
  EXPECT_EQ(errors.kind, error_kind::io);
  EXPECT_GE(errors.lba, file_bytes_ / nvme::block_size);
  const io_error e(errors, "block");
  EXPECT_NE(std::string(e.what()).find("LBA out of range"), std::string::npos) << e.what();
}
