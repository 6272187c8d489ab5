// The nvme controller (src/controller/nvme_controller.h) over the software
// NVMe device, with CPU threads standing in for warps: the queue protocol
// of queue.cuh driving a device that walks PRPs and posts phase-tagged
// completions. The read and write suites run against it as a third
// controller (array_read_test, array_write_test, ...); this file covers
// what is its own: bring-up through make_controller, PRP lists, counters,
// refusals, each misbehaviour of the device ending in a clean error (never
// a hang, never wrong bytes), and the power-cut layer as its medium.
#include "controller/nvme_controller.h"
#include "controller/powercut.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/pattern_file.h"
#include "test_files.h"
#include "warpstore/array.cuh"
#include "warpstore/controller.h"
#include "warpstore/error.h"

namespace warpstore {
namespace {

using clock_type = std::chrono::steady_clock;

options nvme_options(std::uint32_t line = 4096) {
  options o;
  o.controller = controller_kind::nvme_model;
  o.cache_bytes = 256 << 10;
  o.line_size = line;
  o.ways = 4;
  o.queue_pairs = 3;
  o.queue_depth = 16;
  o.timeout_ns = 20'000'000'000ull;
  return o;
}

// `lanes` lanes each read `reads` blocks of `bytes` (one request each,
// block i = lane * reads + n, wrapping over the file) through `io`; returns
// the statuses, and counts the words that differ from the file among the
// reads that succeeded.
struct lane_reads {
  std::vector<nvme::status> status;
  std::uint64_t wrong = 0;
};
lane_reads read_blocks(const io_ref& io, const test::pattern_file& file, unsigned lanes,
                       unsigned reads, std::uint32_t bytes) {
  lane_reads out;
  out.status.resize(std::size_t{lanes} * reads);
  std::atomic<std::uint64_t> wrong{0};
  const std::uint64_t units = file.bytes() / bytes;
  test::run_lanes(lanes, [&](unsigned lane) {
    std::vector<std::byte> buf(bytes);
    for (unsigned n = 0; n < reads; ++n) {
      const std::uint64_t unit = (std::uint64_t{lane} * reads + n) * 7919 % units;
      io_request r{unit * (bytes >> nvme::block_shift), bytes >> nvme::block_shift, buf.data()};
      const nvme::status st = io.read(1u, true, r);
      out.status[std::size_t{lane} * reads + n] = st;
      if (st.success())
        wrong.fetch_add(tools::count_mismatches(buf.data(), unit * bytes, bytes, 0));
    }
  });
  out.wrong = wrong.load();
  return out;
}

std::shared_ptr<nvme_controller> open_nvme(const test::pattern_file& f, const options& o) {
  auto c = std::dynamic_pointer_cast<nvme_controller>(make_controller(f.path(), o));
  if (!c) throw std::logic_error("make_controller did not give the nvme controller");
  return c;
}

}  // namespace

TEST(NvmeController, MakeControllerBringsTheModelUp) {
  test::pattern_file f(4 << 20);
  auto c = open_nvme(f, nvme_options());
  EXPECT_STREQ(c->name(), "nvme-model");
  EXPECT_EQ(c->device_ref().kind, io_kind::queues);
  EXPECT_EQ(c->device_ref().queues.count, 3u);
  EXPECT_EQ(c->driver().identity().block_size, nvme::block_size);
  EXPECT_EQ(c->driver().identity().blocks, f.bytes() / nvme::block_size);
  EXPECT_EQ(c->stats().commands, 0u);  // bring-up's admin commands are not I/O
  c->check();
}

TEST(NvmeController, ReadsThroughQueuesAreRightAndCounted) {
  test::pattern_file f(4 << 20);
  auto c = open_nvme(f, nvme_options());
  const lane_reads r = read_blocks(c->device_ref(), f, 8, 200, 4096);
  for (const nvme::status s : r.status) ASSERT_TRUE(s.success()) << describe(s);
  EXPECT_EQ(r.wrong, 0u);
  const controller_stats s = c->stats();
  EXPECT_EQ(s.commands, 8u * 200u);
  // Coalesced: never more than one SQ doorbell per command, at least one in all.
  EXPECT_GT(s.doorbells, 0u);
  EXPECT_LE(s.doorbells, s.commands);
  EXPECT_EQ(c->queues().protocol_errors(), 0u);
}

// Lines over two memory pages go through a PRP list per staging slot, which
// the device walks (and checks) page by page.
TEST(NvmeController, LargeLinesUsePrpLists) {
  test::pattern_file f(8 << 20);
  for (std::uint32_t line : {8192u, 16384u, 65536u}) {
    SCOPED_TRACE(line);
    options o = nvme_options(line);
    o.cache_bytes = std::size_t{line} * 16;
    auto c = open_nvme(f, o);
    EXPECT_EQ(c->queues().view(0).prp_lists != 0, line > 8192);
    const lane_reads r = read_blocks(c->device_ref(), f, 4, 40, line);
    for (const nvme::status s : r.status) ASSERT_TRUE(s.success()) << describe(s);
    EXPECT_EQ(r.wrong, 0u);
    array<std::uint64_t> a(f.path(), 0, o);
    const array_ref<std::uint64_t> ref = a.ref();
    std::uint64_t bad = 0;
    for (std::uint64_t i = 0; i < ref.size(); i += 97) bad += ref[i] != tools::pattern_word(i * 8);
    EXPECT_EQ(bad, 0u);
    a.check();
  }
}

TEST(NvmeController, ReadOnlyFileRefusesWrites) {
  test::pattern_file f(1 << 20);
  auto c = open_nvme(f, nvme_options());
  std::vector<std::byte> buf(4096, std::byte{1});
  io_request r{0, 8, buf.data()};
  const nvme::status st = c->device_ref().write(1u, true, r);
  EXPECT_FALSE(st.success());
  EXPECT_EQ(st.code(), nvme::sc::namespace_write_protected);
  const std::vector<std::byte> file = test::file_bytes_at(f.path(), 0, 4096);
  EXPECT_EQ(tools::count_mismatches(file.data(), 0, file.size(), 0), 0u);
}

TEST(NvmeController, LineBeyondTheDevicesLargestTransferIsRefused) {
  test::pattern_file f(1 << 20);
  auto file = std::make_shared<backing_file>(f.path(), direct_io::off);
  nvme_model::config m;
  m.mdts = 2;  // 16 KiB
  options o = nvme_options(65536);
  try {
    nvme_controller c(file, o, 65536, m);
    FAIL() << "a 64 KiB line was taken by a device of 16 KiB transfers";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MDTS"), std::string::npos) << e.what();
  }
}

// Each misbehaviour the device can show, under 8 lanes of 100 reads: every
// read ends (no hang), no read that reported success holds wrong bytes, and
// the failure shows where it was injected.
struct fault_case {
  const char* name;
  nvme_model::faults f;
  bool errors_expected;
};

class NvmeFaults : public ::testing::TestWithParam<fault_case> {};

TEST_P(NvmeFaults, EndCleanlyWithRightBytes) {
  test::pattern_file f(4 << 20);
  options o = nvme_options();
  o.timeout_ns = 500'000'000ull;  // a dropped completion fails its pair after this
  auto c = open_nvme(f, o);
  c->model().inject(GetParam().f);
  const auto start = clock_type::now();
  const lane_reads r = read_blocks(c->device_ref(), f, 8, 100, 4096);
  const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  EXPECT_LT(secs, 30.0);
  EXPECT_EQ(r.wrong, 0u);
  std::uint64_t failed = 0;
  for (const nvme::status s : r.status) failed += s.success() ? 0 : 1;
  if (GetParam().errors_expected)
    EXPECT_GT(failed, 0u);
  else
    EXPECT_EQ(failed, 0u);
  EXPECT_EQ(c->queues().protocol_errors(), 0u);
  if (GetParam().f.fatal) {
    EXPECT_THROW(c->check(), runtime_error);
  } else {
    c->check();
  }
}

nvme_model::faults make_faults(void (*set)(nvme_model::faults&)) {
  nvme_model::faults f;
  set(f);
  return f;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, NvmeFaults,
    ::testing::Values(
        fault_case{"error_status", make_faults([](nvme_model::faults& f) { f.fail_next = 20; }), true},
        fault_case{"dropped_completion", make_faults([](nvme_model::faults& f) { f.drop_next = 1; }),
                   true},
        fault_case{"late_completions",
                   make_faults([](nvme_model::faults& f) { f.delay = std::chrono::microseconds(300); }),
                   false},
        fault_case{"reordered_completions",
                   make_faults([](nvme_model::faults& f) { f.reorder_window = 4; }), false},
        fault_case{"controller_fatal", make_faults([](nvme_model::faults& f) { f.fatal = true; }),
                   true},
        fault_case{"namespace_not_ready",
                   make_faults([](nvme_model::faults& f) { f.namespace_not_ready = true; }), true}),
    [](const ::testing::TestParamInfo<fault_case>& i) { return std::string(i.param.name); });

}  // namespace warpstore

namespace warpstore {

// The power-cut layer as the device's medium: a WRITE flushed before the
// cut survives it, one not flushed is lost (loss 1), and after the cut every
// command fails with a media status.
TEST(NvmeController, PowerCutKeepsFlushedWritesOnly) {
  test::pattern_file f(1 << 20);
  auto file = std::make_shared<backing_file>(f.path(), direct_io::off, file_access::read_write);
  auto layer = std::make_shared<powercut_layer>(file);
  {
    nvme_model::config m;
    m.media = layer;
    options o = nvme_options();
    o.writable = true;
    nvme_controller c(file, o, 4096, m);
    const io_ref io = c.device_ref();
    std::vector<std::byte> ones(4096, std::byte{1}), twos(4096, std::byte{2});
    ASSERT_TRUE(io.write(1u, true, io_request{0, 8, ones.data()}).success());
    ASSERT_TRUE(io.flush().success());
    ASSERT_TRUE(io.write(1u, true, io_request{8, 8, twos.data()}).success());
    EXPECT_GT(layer->volatile_blocks(), 0u);
    layer->power_off();
    EXPECT_EQ(io.write(1u, true, io_request{16, 8, twos.data()}).code(), nvme::sc::write_fault);
    std::vector<std::byte> buf(4096);
    EXPECT_EQ(io.read(1u, true, io_request{0, 8, buf.data()}).code(), nvme::sc::unrecovered_read);
    EXPECT_FALSE(io.flush().success());
  }
  const powercut_layer::cut_result r = layer->cut(1, 1.0);
  EXPECT_EQ(r.reverted, 8u);  // the 8 blocks of the un-flushed WRITE
  const std::vector<std::byte> kept = test::file_bytes_at(f.path(), 0, 4096);
  EXPECT_EQ(kept, std::vector<std::byte>(4096, std::byte{1}));
  const std::vector<std::byte> lost = test::file_bytes_at(f.path(), 4096, 8192);
  EXPECT_EQ(tools::count_mismatches(lost.data(), 4096, lost.size(), 0), 0u);
}

}  // namespace warpstore

namespace warpstore {

// A file whose size is not a whole number of blocks: its partial last block
// is in the namespace, reads as zeros past the end, and a WRITE of it stops
// at the end (the file does not grow).
TEST(NvmeController, PartialLastBlockEndsAtTheFile) {
  test::pattern_file f(20000);  // 39 whole blocks and 32 bytes
  options o = nvme_options();
  o.writable = true;
  auto c = open_nvme(f, o);
  EXPECT_EQ(c->driver().identity().blocks, 40u);
  const io_ref io = c->device_ref();
  std::vector<std::byte> block(512, std::byte{0x77});
  ASSERT_TRUE(io.read(1u, true, io_request{39, 1, block.data()}).success());
  EXPECT_EQ(tools::count_mismatches(block.data(), 39 * 512, 32, 0), 0u);
  EXPECT_EQ(std::vector<std::byte>(block.begin() + 32, block.end()),
            std::vector<std::byte>(480, std::byte{0}));
  std::vector<std::byte> ab(512, std::byte{0xAB});
  ASSERT_TRUE(io.write(1u, true, io_request{39, 1, ab.data()}).success());
  ASSERT_TRUE(io.flush().success());
  EXPECT_EQ(std::filesystem::file_size(f.path()), 20000u);
  EXPECT_EQ(test::file_bytes_at(f.path(), 19968, 32), std::vector<std::byte>(32, std::byte{0xAB}));
  EXPECT_FALSE(io.read(1u, true, io_request{40, 1, block.data()}).success());  // past the namespace
}

}  // namespace warpstore
