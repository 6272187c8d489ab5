// WRITE and FLUSH at the controllers, through the device-side io_ref exactly
// as kernels use it (on the CPU target a warp is one thread, mask 1u): the
// host controller with both deliveries, and the memory controller.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "controller/host_controller.h"
#include "controller/memory_controller.h"
#include "support/pattern.cuh"
#include "support/pattern_file.h"
#include "test_files.h"
#include "warpstore/controller.h"
#include "warpstore/error.h"
#include "warpstore/io.cuh"

namespace warpstore {
namespace {

constexpr std::uint32_t block = nvme::block_size;
constexpr std::uint64_t new_seed = 7;  // what writes put into the file

options test_options(delivery d) {
  options o;
  o.queue_pairs = 4;
  o.queue_depth = 8;
  o.service_threads = 2;
  o.deliver = d;
  o.direct = direct_io::off;
  o.uring_depth = 64;
  o.timeout_ns = 5'000'000'000ull;
  return o;
}

std::shared_ptr<host_controller> make_host(const std::string& path, const options& o,
                                           file_access access) {
  return std::make_shared<host_controller>(std::make_shared<backing_file>(path, o.direct, access),
                                           o, 4096);
}

std::vector<std::byte> read_file(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  std::vector<std::byte> out(static_cast<std::size_t>(st.st_size));
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  ::close(fd);
  return out;
}

// Lanes write disjoint random block ranges with the new pattern; returns
// which 512-byte blocks were written.
std::vector<char> random_writes(const io_ref& io, std::uint64_t file_bytes, unsigned lanes,
                                unsigned writes_per_lane, std::atomic<int>& failures) {
  const std::uint64_t capacity = file_bytes / block;
  std::vector<char> written(capacity, 0);
  test::run_lanes(lanes, [&](unsigned lane) {
    std::mt19937_64 rng(99 + lane);
    std::vector<std::byte> buf(4096);
    for (unsigned n = 0; n < writes_per_lane; ++n) {
      // Lane-owned stripes of 8 blocks keep lanes off each other's bytes.
      const std::uint64_t stripes = capacity / 8;
      std::uint64_t stripe = rng() % stripes;
      stripe = stripe - stripe % lanes + lane;
      if (stripe >= stripes) stripe = lane;
      const std::uint32_t blocks = 1 + static_cast<std::uint32_t>(rng() % 8);
      const std::uint64_t slba = stripe * 8;
      tools::fill_buffer(buf.data(), slba * block, std::size_t{blocks} * block, new_seed);
      const nvme::status st = io.write(1u, true, io_request{slba, blocks, buf.data()});
      if (!st.success()) {
        failures.fetch_add(1);
        continue;
      }
      for (std::uint32_t b = 0; b < blocks; ++b) written[slba + b] = 1;
    }
  });
  return written;
}

std::uint64_t mismatches(const std::vector<std::byte>& file, const std::vector<char>& written) {
  std::uint64_t bad = 0;
  for (std::uint64_t o = 0; o < file.size(); ++o) {
    const std::uint64_t seed = written[o / block] ? new_seed : 0;
    if (static_cast<std::uint8_t>(file[o]) != tools::pattern_byte(o, seed)) ++bad;
  }
  return bad;
}

class HostWrite : public ::testing::TestWithParam<delivery> {};

TEST_P(HostWrite, ManyLanesWriteThenFlushAndTheFileHoldsEveryByte) {
  test::pattern_file f(4 << 20);
  auto ctl = make_host(f.path(), test_options(GetParam()), file_access::read_write);
  const io_ref io = ctl->device_ref();
  std::atomic<int> failures{0};
  const std::vector<char> written = random_writes(io, f.bytes(), 8, 400, failures);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(io.flush().success());
  ctl->check();
  EXPECT_EQ(mismatches(read_file(f.path()), written), 0u);
  // Read back through the controller too: the queues see the new bytes.
  std::vector<std::byte> line(4096);
  for (std::uint64_t slba = 0; slba < f.bytes() / block; slba += 8) {
    ASSERT_TRUE(io.read(1u, true, io_request{slba, 8, line.data()}).success());
    for (std::uint32_t i = 0; i < 4096; ++i) {
      const std::uint64_t o = slba * block + i;
      ASSERT_EQ(static_cast<std::uint8_t>(line[i]),
                tools::pattern_byte(o, written[o / block] ? new_seed : 0))
          << o;
    }
  }
}

TEST_P(HostWrite, FlushesFromManyLanesInterleavedWithWrites) {
  test::pattern_file f(1 << 20);
  auto ctl = make_host(f.path(), test_options(GetParam()), file_access::read_write);
  const io_ref io = ctl->device_ref();
  std::atomic<int> bad{0};
  test::run_lanes(6, [&](unsigned lane) {
    std::vector<std::byte> buf(4096);
    for (std::uint64_t slba = lane * 8; slba < f.bytes() / block; slba += 6 * 8) {
      tools::fill_buffer(buf.data(), slba * block, 4096, new_seed);
      if (!io.write(1u, true, io_request{slba, 8, buf.data()}).success()) bad.fetch_add(1);
      if ((slba / 8) % 5 == 0 && !io.flush().success()) bad.fetch_add(1);
    }
    if (!io.flush().success()) bad.fetch_add(1);
  });
  EXPECT_EQ(bad.load(), 0);
  ctl->check();
  const std::vector<char> all(f.bytes() / block, 1);
  EXPECT_EQ(mismatches(read_file(f.path()), all), 0u);
}

TEST_P(HostWrite, ReadOnlyOpenRefusesWritesWithWriteProtected) {
  test::pattern_file f(1 << 20);
  auto ctl = make_host(f.path(), test_options(GetParam()), file_access::read_only);
  std::vector<std::byte> buf(4096);
  const nvme::status st = ctl->device_ref().write(1u, true, io_request{0, 8, buf.data()});
  EXPECT_EQ(st.type(), nvme::status_type::generic);
  EXPECT_EQ(st.code(), nvme::sc::namespace_write_protected);
  EXPECT_NE(describe(st).find("read-only"), std::string::npos);
  EXPECT_TRUE(ctl->device_ref().flush().success());  // nothing to make durable
  EXPECT_EQ(mismatches(read_file(f.path()), std::vector<char>(f.bytes() / block, 0)), 0u);
}

TEST_P(HostWrite, OutOfRangeWriteIsRefusedAndTheFileDoesNotGrow) {
  // 1000 bytes: two blocks, the second partial.
  test::pattern_file f(1000);
  auto ctl = make_host(f.path(), test_options(GetParam()), file_access::read_write);
  const io_ref io = ctl->device_ref();
  std::vector<std::byte> buf(4096);
  tools::fill_buffer(buf.data(), 0, 1024, new_seed);
  EXPECT_EQ(io.write(1u, true, io_request{2, 1, buf.data()}).code(), nvme::sc::lba_out_of_range);
  EXPECT_EQ(io.write(1u, true, io_request{1, 2, buf.data()}).code(), nvme::sc::lba_out_of_range);
  // The partial last block is written as far as the file goes.
  EXPECT_TRUE(io.write(1u, true, io_request{0, 2, buf.data()}).success());
  EXPECT_TRUE(io.flush().success());
  const std::vector<std::byte> file = read_file(f.path());
  ASSERT_EQ(file.size(), 1000u);
  for (std::uint64_t o = 0; o < file.size(); ++o)
    ASSERT_EQ(static_cast<std::uint8_t>(file[o]), tools::pattern_byte(o, new_seed)) << o;
}

TEST_P(HostWrite, FlushCompletesOnlyAfterEveryEarlierWriteOfItsQueue) {
  test::pattern_file f(1 << 20);
  auto ctl = make_host(f.path(), test_options(GetParam()), file_access::read_write);
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  for (int round = 0; round < 50; ++round) {
    // Seven WRITEs then a FLUSH, all submitted before any is waited for.
    std::vector<std::vector<std::byte>> bufs(7, std::vector<std::byte>(4096));
    std::uint64_t tickets[8];
    const std::uint64_t cq_first = qp.state->cq_head;  // CPU target: plain memory
    for (int k = 0; k < 8; ++k) {
      tickets[k] = qp.take_tickets(1u, true);
      ASSERT_TRUE(qp.claim(tickets[k]).success());
      if (k < 7) {
        const std::uint64_t slba = (round * 7 + k) % (f.bytes() / 4096) * 8;
        tools::fill_buffer(bufs[k].data(), slba * block, 4096, new_seed);
        if (qp.staging != nullptr) std::memcpy(qp.staging_of(tickets[k]), bufs[k].data(), 4096);
        qp.post(tickets[k], nvme::make_rw(nvme::opcode::write, 0, 0, slba, 8, 0), bufs[k].data());
      } else {
        qp.post(tickets[k], nvme::make_flush(0, 0), nullptr);
      }
    }
    ASSERT_TRUE(qp.wait(tickets[7]).success());
    // The FLUSH's completion came after every WRITE's.
    for (int k = 0; k < 7; ++k) {
      nvme::status st;
      EXPECT_TRUE(qp.poll(tickets[k], st)) << "round " << round << " write " << k;
      EXPECT_TRUE(st.success());
    }
    for (int k = 0; k < 8; ++k) {
      ASSERT_TRUE(qp.wait(tickets[k]).success());
      qp.release(tickets[k]);
    }
    // And it was posted last of the eight (writes that complete at once
    // would otherwise hide a FLUSH that overtook them).
    ASSERT_EQ(qp.state->cq_head, cq_first + 8);
    EXPECT_EQ(qp.cq[(cq_first + 7) & (qp.depth - 1)].cid, qp.slot_of(tickets[7]))
        << "round " << round;
  }
  ctl->check();
}

INSTANTIATE_TEST_SUITE_P(Deliveries, HostWrite,
                         ::testing::Values(delivery::gpu_pull, delivery::copy_engine),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Without write-behind, and starting writeback every 64 KiB of the write-out.
class MemoryWrite : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(MemoryWrite, WritesReachTheFileOnlyWhenMadeDurable) {
  test::pattern_file f(2 << 20);
  const std::vector<char> none(f.bytes() / block, 0);  // no block written
  auto ctl = std::make_shared<memory_controller>(
      std::make_shared<backing_file>(f.path(), direct_io::off, file_access::read_write), 2,
      GetParam());
  const io_ref io = ctl->device_ref();
  std::atomic<int> failures{0};
  const std::vector<char> written = random_writes(io, f.bytes(), 4, 200, failures);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(io.flush().success());
  // Visible to reads at once, in the file only after make_durable().
  std::vector<std::byte> line(4096);
  ASSERT_TRUE(io.read(1u, true, io_request{0, 8, line.data()}).success());
  EXPECT_EQ(mismatches(read_file(f.path()), none), 0u);
  ctl->make_durable();
  EXPECT_EQ(mismatches(read_file(f.path()), written), 0u);
  // Nothing left dirty: a second write-out changes nothing.
  ctl->make_durable();
  EXPECT_EQ(mismatches(read_file(f.path()), written), 0u);
}

INSTANTIATE_TEST_SUITE_P(WriteBehind, MemoryWrite, ::testing::Values(0u, 64u << 10),
                         [](const auto& info) { return "every_" + std::to_string(info.param); });

TEST(MemoryWriteReadOnly, ReadOnlyOpenRefusesWrites) {
  test::pattern_file f(1 << 20);
  auto ctl = std::make_shared<memory_controller>(
      std::make_shared<backing_file>(f.path(), direct_io::off, file_access::read_only), 2);
  std::vector<std::byte> buf(4096);
  EXPECT_EQ(ctl->device_ref().write(1u, true, io_request{0, 8, buf.data()}).code(),
            nvme::sc::namespace_write_protected);
  EXPECT_NO_THROW(ctl->make_durable());
}

TEST(BackingFile, ReadWriteOpenOfAReadOnlyFileFailsClearly) {
  test::pattern_file f(1 << 20);
  ASSERT_EQ(::chmod(f.path().c_str(), 0400), 0);
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores file permissions";
  try {
    backing_file b(f.path(), direct_io::off, file_access::read_write);
    FAIL() << "opened a read-only file for writing";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(f.path()), std::string::npos);
  }
}

}  // namespace
}  // namespace warpstore
