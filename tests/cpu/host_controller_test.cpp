// The host controller against the real queue protocol: std::thread lanes act
// as the GPU (on the CPU target a warp is one thread, so masks are 1u) and
// use queue_pair_ref exactly as device code does.
#include "controller/host_controller.h"
#include "controller/fault_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "support/pattern.cuh"
#include "support/raw_queue.h"
#include "test_files.h"
#include "warpstore/controller.h"
#include "warpstore/io.cuh"
#include "warpstore/nvme.h"

namespace warpstore {
namespace {

constexpr std::uint32_t block = nvme::block_size;

// Temporary files whose bytes follow tools::pattern_word (test_files.h).
using test::pattern_file;
using test::raw_queue;

// First byte of `got` (bytes at file offset `offset`) that differs from the
// file's content, zeros past its end; -1 when all match.
long long first_mismatch(const std::byte* got, std::uint64_t offset, std::uint32_t bytes,
                         std::uint64_t file_size) {
  for (std::uint32_t i = 0; i < bytes; ++i) {
    const std::uint64_t o = offset + i;
    const std::uint8_t want = o < file_size ? tools::pattern_byte(o) : 0;
    if (static_cast<std::uint8_t>(got[i]) != want) return i;
  }
  return -1;
}

// One lane executing one command through the queue protocol, as device code
// does: ticket, submit, wait, copy from staging, release.
nvme::status execute(const queue_pair_ref& qp, const nvme::command& cmd, std::byte* dst) {
  const std::uint64_t t = qp.take_tickets(1u, true);
  nvme::status st = qp.submit(t, cmd, dst);
  if (!st.success()) return st;
  st = qp.wait(t);
  if (st.is_deadline()) return st;  // the slot stays held: the controller may still write it
  if (st.success() && qp.staging != nullptr &&
      cmd.opc == static_cast<std::uint8_t>(nvme::opcode::read))
    std::memcpy(dst, qp.staging_of(t), std::size_t{cmd.nlb()} * block);
  qp.release(t);
  return st;
}

nvme::status read_blocks(const queue_pair_ref& qp, std::uint64_t slba, std::uint32_t blocks,
                         std::byte* dst) {
  return execute(qp, nvme::make_rw(nvme::opcode::read, 0, 0, slba, blocks, 0), dst);
}

std::string describe(nvme::status st) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "status sct=%u sc=0x%02x", static_cast<unsigned>(st.type()),
                st.code());
  return buf;
}

options test_options(delivery d, std::uint32_t queues = 4, std::uint32_t depth = 8,
                     std::uint32_t threads = 2) {
  options o;
  o.queue_pairs = queues;
  o.queue_depth = depth;
  o.service_threads = threads;
  o.deliver = d;
  o.direct = direct_io::off;
  o.uring_depth = 64;
  // A protocol bug shows as deadline_exceeded within seconds, not a hang.
  o.timeout_ns = 5'000'000'000ull;
  return o;
}

std::unique_ptr<host_controller> make(const pattern_file& f, const options& o,
                                      std::uint32_t slot_bytes = 4096) {
  return std::make_unique<host_controller>(std::make_shared<backing_file>(f.path(), o.direct), o,
                                           slot_bytes);
}

// Many lanes reading random ranges, every byte verified.
void random_reads(host_controller& ctl, std::uint64_t file_size, unsigned lanes,
                  unsigned reads_per_lane, std::uint32_t max_blocks,
                  std::uint32_t alignment_blocks) {
  const io_ref io = ctl.device_ref();
  const std::uint64_t capacity = (file_size + block - 1) / block;
  std::atomic<std::uint64_t> failures{0}, bytes{0};
  std::vector<std::string> first_error(lanes);
  std::vector<std::thread> threads;
  for (unsigned lane = 0; lane < lanes; ++lane) {
    threads.emplace_back([&, lane] {
      std::mt19937_64 rng(1234 + lane);
      std::vector<std::byte> dst(std::size_t{max_blocks} * block);
      const queue_pair_ref& qp = io.queues.pick(lane);
      for (unsigned i = 0; i < reads_per_lane; ++i) {
        const std::uint32_t blocks =
            alignment_blocks *
            static_cast<std::uint32_t>(1 + rng() % (max_blocks / alignment_blocks));
        const std::uint64_t slba =
            (rng() % ((capacity - blocks) / alignment_blocks + 1)) * alignment_blocks;
        std::fill(dst.begin(), dst.end(), std::byte{0xEE});
        const nvme::status st = read_blocks(qp, slba, blocks, dst.data());
        const long long bad =
            st.success() ? first_mismatch(dst.data(), slba * block, blocks * block, file_size) : -2;
        if (bad != -1) {
          if (failures.fetch_add(1) == 0 || first_error[lane].empty())
            first_error[lane] =
                "lane " + std::to_string(lane) + " read " + std::to_string(i) + " slba " +
                std::to_string(slba) + " blocks " + std::to_string(blocks) + ": " +
                (bad == -2 ? describe(st) : "byte " + std::to_string(bad) + " differs");
          if (!st.success()) return;  // a failed ticket may wedge the queue: stop this lane
        } else {
          bytes += blocks * block;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : first_error)
    if (!e.empty()) ADD_FAILURE() << e;
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(bytes.load(), ctl.stats().bytes);
  EXPECT_NO_THROW(ctl.check());
}

// ---------------------------------------------------------------------------
// backing_file

TEST(BackingFile, OpensAndSizes) {
  pattern_file f(3 * block + 100);
  backing_file bf(f.path(), direct_io::off);
  EXPECT_GE(bf.fd(), 0);
  EXPECT_FALSE(bf.direct());
  EXPECT_EQ(bf.size_bytes(), 3u * block + 100);
  EXPECT_EQ(bf.capacity_blocks(), 4u);  // the partial last block counts
  EXPECT_EQ(bf.path(), f.path());
  EXPECT_EQ(::fcntl(bf.fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST(BackingFile, MissingFileNamesPathAndErrno) {
  const std::string path = "/nonexistent-dir-warpstore/none.bin";
  try {
    backing_file bf(path, direct_io::off);
    FAIL() << "opened a missing file";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(BackingFile, DirectoryIsRejected) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  for (direct_io mode : {direct_io::off, direct_io::automatic}) {
    try {
      backing_file bf(dir, mode);
      FAIL() << "opened a directory";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
    } catch (const std::system_error& e) {
      // Some filesystems refuse O_DIRECT on a directory with another errno.
      EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
    }
  }
}

TEST(BackingFile, PermissionDeniedNamesPath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  pattern_file f(block);
  ASSERT_EQ(::chmod(f.path().c_str(), 0), 0);
  try {
    backing_file bf(f.path(), direct_io::off);
    FAIL() << "opened an unreadable file";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EACCES);
    EXPECT_NE(std::string(e.what()).find(f.path()), std::string::npos) << e.what();
  }
}

TEST(BackingFile, AutomaticDirectOpens) {
  pattern_file f(64 * 1024);
  backing_file bf(f.path(), direct_io::automatic);
  EXPECT_EQ(bf.size_bytes(), 64u * 1024);
  if (bf.direct()) {
    const std::uint32_t a = bf.direct_alignment();
    EXPECT_TRUE(a >= 512 && (a & (a - 1)) == 0) << a;
  }
}

// ---------------------------------------------------------------------------
// host controller, both deliveries

class HostController : public ::testing::TestWithParam<delivery> {};

INSTANTIATE_TEST_SUITE_P(Deliveries, HostController,
                         ::testing::Values(delivery::gpu_pull, delivery::copy_engine),
                         [](const auto& info) {
                           return std::string(info.param == delivery::gpu_pull ? "gpu_pull"
                                                                               : "copy_engine");
                         });

TEST_P(HostController, SingleRead) {
  pattern_file f(1 << 20);
  auto ctl = make(f, test_options(GetParam()));
  EXPECT_STREQ(ctl->name(), "host");
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  EXPECT_EQ(qp.staging != nullptr, GetParam() == delivery::gpu_pull);
  std::vector<std::byte> dst(4096);
  const nvme::status st = read_blocks(qp, 17, 8, dst.data());
  ASSERT_TRUE(st.success()) << describe(st);
  EXPECT_EQ(first_mismatch(dst.data(), 17 * block, 4096, f.bytes()), -1);
  const controller_stats s = ctl->stats();
  EXPECT_EQ(s.commands, 1u);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.bytes, 4096u);
  EXPECT_GE(s.doorbells, 1u);
  EXPECT_NO_THROW(ctl->check());
  std::printf("[          ] registered buffers: %s\n", ctl->registered_buffers() ? "yes" : "no");
}

TEST_P(HostController, ManyThreadsRandomReadsAllVerified) {
  pattern_file f(4 << 20);
  auto ctl = make(f, test_options(GetParam(), 4, 8, 2));
  constexpr unsigned lanes = 16, reads = 2000;
  random_reads(*ctl, f.bytes(), lanes, reads, 8, 1);
  const controller_stats s = ctl->stats();
  EXPECT_EQ(s.commands, std::uint64_t{lanes} * reads);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_GT(s.doorbells, 0u);
  EXPECT_LE(s.doorbells, s.commands);
}

TEST_P(HostController, LbaOutOfRangeThenKeepsServing) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(GetParam(), 1, 4, 1));
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  std::vector<std::byte> dst(4096);
  struct {
    std::uint64_t slba;
    std::uint32_t blocks;
  } const bad[] = {{64, 1}, {60, 8}, {~std::uint64_t{0} - 2, 8}, {1ull << 40, 1}};
  for (const auto& b : bad) {
    const nvme::status st = read_blocks(qp, b.slba, b.blocks, dst.data());
    EXPECT_EQ(st.type(), nvme::status_type::generic) << b.slba;
    EXPECT_EQ(st.code(), nvme::sc::lba_out_of_range) << b.slba << " " << describe(st);
  }
  // The last valid range still works, and the queue keeps going.
  for (int i = 0; i < 20; ++i) {
    const nvme::status st = read_blocks(qp, 56, 8, dst.data());
    ASSERT_TRUE(st.success()) << describe(st);
    EXPECT_EQ(first_mismatch(dst.data(), 56 * block, 4096, f.bytes()), -1);
  }
  EXPECT_EQ(ctl->stats().errors, 4u);
  EXPECT_EQ(ctl->stats().commands, 24u);
  EXPECT_NO_THROW(ctl->check());
}

TEST_P(HostController, BadNamespace) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(GetParam(), 1, 4, 1));
  queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  qp.nsid = 2;  // submit() stamps the view's namespace into every command
  std::vector<std::byte> dst(4096);
  nvme::status st = read_blocks(qp, 0, 1, dst.data());
  EXPECT_EQ(st.type(), nvme::status_type::generic);
  EXPECT_EQ(st.code(), 0x0B) << describe(st);  // invalid namespace or format
  qp.nsid = 1;
  st = read_blocks(qp, 0, 1, dst.data());
  EXPECT_TRUE(st.success()) << describe(st);
}

TEST_P(HostController, WriteToReadOnlyOpenIsWriteProtected) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(GetParam(), 1, 4, 1));
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  std::vector<std::byte> src(4096, std::byte{1});
  const nvme::status st =
      execute(qp, nvme::make_rw(nvme::opcode::write, 0, 0, 0, 1, 0), src.data());
  EXPECT_EQ(st.type(), nvme::status_type::generic);
  EXPECT_EQ(st.code(), nvme::sc::namespace_write_protected) << describe(st);
  nvme::command vendor = nvme::make_flush(0, 0);
  vendor.opc = 0x99;
  EXPECT_EQ(execute(qp, vendor, nullptr).code(), nvme::sc::invalid_opcode);
  // Nothing reached the file.
  std::vector<std::byte> dst(4096);
  ASSERT_TRUE(read_blocks(qp, 0, 1, dst.data()).success());
  EXPECT_EQ(first_mismatch(dst.data(), 0, block, f.bytes()), -1);
}

TEST_P(HostController, FlushSucceeds) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(GetParam(), 1, 4, 1));
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  for (int i = 0; i < 5; ++i) {
    const nvme::status st = execute(qp, nvme::make_flush(0, 0), nullptr);
    EXPECT_TRUE(st.success()) << describe(st);
  }
  EXPECT_EQ(ctl->stats().commands, 5u);
  EXPECT_EQ(ctl->stats().bytes, 0u);
}

TEST_P(HostController, TransferLargerThanSlotIsInvalidField) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(GetParam(), 1, 4, 1), 2048);
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  std::vector<std::byte> dst(8192);
  nvme::status st = read_blocks(qp, 0, 5, dst.data());
  EXPECT_EQ(st.code(), nvme::sc::invalid_field) << describe(st);
  st = read_blocks(qp, 0, 4, dst.data());
  ASSERT_TRUE(st.success()) << describe(st);
  EXPECT_EQ(first_mismatch(dst.data(), 0, 2048, f.bytes()), -1);
}

TEST_P(HostController, PartialLastBlockIsZeroFilled) {
  const std::uint64_t size = 9 * block + 100;  // 10 blocks, the last one 100 bytes
  pattern_file f(size);
  auto ctl = make(f, test_options(GetParam(), 1, 4, 1));
  const queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  // Dirty the staging (ours, or the controller's own via a full read) so a
  // missing zero-fill shows.
  if (qp.staging) std::memset(qp.staging, 0xAB, std::size_t{qp.depth} * qp.slot_bytes);
  std::vector<std::byte> full(4096);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(read_blocks(qp, 0, 8, full.data()).success());
  for (const std::uint32_t blocks : {1u, 2u, 4u, 8u}) {
    const std::uint64_t slba = 10 - blocks;
    std::vector<std::byte> dst(blocks * block, std::byte{0xCD});
    const nvme::status st = read_blocks(qp, slba, blocks, dst.data());
    ASSERT_TRUE(st.success()) << describe(st);
    EXPECT_EQ(first_mismatch(dst.data(), slba * block, blocks * block, size), -1) << blocks;
    EXPECT_EQ(dst.back(), std::byte{0});
  }
  EXPECT_EQ(read_blocks(qp, 10, 1, std::vector<std::byte>(block).data()).code(),
            nvme::sc::lba_out_of_range);
}

TEST_P(HostController, DepthTwoManyThreadsNoDeadlock) {
  pattern_file f(1 << 20);
  auto ctl = make(f, test_options(GetParam(), 1, 2, 1));
  random_reads(*ctl, f.bytes(), 12, 300, 8, 1);
  EXPECT_EQ(ctl->stats().commands, 12u * 300);
}

TEST_P(HostController, MoreQueuesThanThreadsAndOneUringSlot) {
  pattern_file f(1 << 20);
  options o = test_options(GetParam(), 5, 4, 3);
  o.uring_depth = 1;  // every read waits for the one io_uring slot
  auto ctl = make(f, o);
  EXPECT_EQ(ctl->service_threads(), 3u);
  random_reads(*ctl, f.bytes(), 10, 300, 8, 1);
}

TEST_P(HostController, IoRefReadPath) {
  pattern_file f(1 << 20);
  auto ctl = make(f, test_options(GetParam(), 2, 8, 1));
  const io_ref io = ctl->device_ref();
  ASSERT_EQ(io.kind, io_kind::queues);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int lane = 0; lane < 4; ++lane)
    threads.emplace_back([&, lane] {
      std::vector<std::byte> dst(4096);
      for (int i = 0; i < 200; ++i) {
        const std::uint64_t slba = static_cast<std::uint64_t>((lane * 977 + i * 131) % 2040);
        const nvme::status st = io.read(1u, true, io_request{slba, 8, dst.data()});
        if (!st.success() || first_mismatch(dst.data(), slba * block, 4096, f.bytes()) != -1) ++bad;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(HostControllerPull, PrpOutsideOwnStagingSlotIsRejected) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(delivery::gpu_pull, 1, 4, 1));
  queue_pair_ref qp = ctl->device_ref().queues.pick(0);
  queue_pair_ref shifted = qp;
  // PRP1 (the staging's device address) no longer the slot the cid names.
  shifted.staging = qp.staging + 512;
  shifted.staging_device = qp.staging_device + 512;
  std::vector<std::byte> dst(4096);
  nvme::status st = read_blocks(shifted, 0, 1, dst.data());
  EXPECT_EQ(st.code(), nvme::sc::invalid_field) << describe(st);
  st = read_blocks(qp, 0, 1, dst.data());
  EXPECT_TRUE(st.success()) << describe(st);
}

TEST(HostControllerLifecycle, StopsPromptlyAndValidates) {
  pattern_file f(64 * block);
  options o = test_options(delivery::gpu_pull, 8, 16, 4);
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto ctl = make(f, o);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let threads go idle
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  auto file = std::make_shared<backing_file>(f.path(), direct_io::off);
  o.service_threads = 0;
  EXPECT_THROW(host_controller(file, o, 4096), std::invalid_argument);
  o.service_threads = 1;
  o.queue_depth = 12;
  EXPECT_THROW(host_controller(file, o, 4096), std::invalid_argument);
  o.queue_depth = 8;
  EXPECT_THROW(host_controller(file, o, 1000), std::invalid_argument);
  EXPECT_THROW(host_controller(nullptr, o, 4096), std::invalid_argument);
}

// Idle service threads sleep (a library must not keep cores from the process
// around it) and still serve every queue: with nothing announced, a command
// on a queue whose thread naps is seen after that nap (20 ms at most).

TEST(HostControllerSleep, IdleThreadsSleepAndStillServeEveryQueue) {
  pattern_file f(1 << 20);
  auto ctl = make(f, test_options(delivery::gpu_pull, 4, 8, 4));  // worker k owns queue k
  std::vector<std::byte> dst(4096);
  ASSERT_TRUE(read_blocks(ctl->device_ref().queues.pick(0), 0, 8, dst.data()).success());
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // past the long quiet
  const test::idle_cost idle = test::measure_idle(std::chrono::milliseconds(1000));
  EXPECT_LT(idle.cpu_share, test::idle_share_bound)
      << "4 idle service threads took " << idle.cpu_share << " of a core";
  // Four threads napping 20 ms at a time: 200 wake-ups a second.
  EXPECT_LT(idle.wakeups_per_s, 400) << "4 idle service threads";

  for (std::uint32_t q : {3u, 1u}) {  // every thread napping
    const auto t0 = std::chrono::steady_clock::now();
    const nvme::status st = read_blocks(ctl->device_ref().queues.pick(q), 8 * q, 8, dst.data());
    const auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_TRUE(st.success()) << describe(st);
    EXPECT_EQ(first_mismatch(dst.data(), 8 * q * block, 4096, f.bytes()), -1);
    EXPECT_LT(waited, std::chrono::milliseconds(100 * test::sanitizer_deadline_scale))
        << "queue " << q;
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  }
  // Announced work wakes every thread at once: served sooner than a nap ends.
  // Under a sanitizer on two cores a woken thread can wait longer than a nap
  // for a core (CI measured 35 ms under TSan beside another test), so only
  // the plain build can tell a wake-up from a nap; there it is asserted.
  {
    activity_scope busy(*ctl);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(read_blocks(ctl->device_ref().queues.pick(2), 16, 8, dst.data()).success());
    if (!test::sanitized) {
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
    }
    EXPECT_EQ(first_mismatch(dst.data(), 16 * block, 4096, f.bytes()), -1);
  }
}

TEST(HostControllerQueue, SpreadSettingReachesTheQueueSet) {
  // options::queue_spread travels to the device's view; a lane keeps one
  // pair for a command either way (on the CPU a lane's locality is its own).
  pattern_file f(1 << 20);
  for (bool spread : {false, true}) {
    options o = test_options(delivery::gpu_pull, 4, 8, 2);
    o.queue_spread = spread;
    host_controller ctl(std::make_shared<backing_file>(f.path(), o.direct), o, 4096);
    const queue_set_ref qs = ctl.device_ref().queues;
    EXPECT_EQ(qs.spread, spread);
    std::atomic<unsigned> bad{0};
    test::run_lanes(8, [&](unsigned lane) {
      const queue_pair_ref& qp = qs.pick(lane);
      EXPECT_EQ(&qp, &qs.pairs[qs.index_for(lane)]);
      std::vector<std::byte> dst(4096);
      if (!read_blocks(qp, 8 * lane, 8, dst.data()).success() ||
          first_mismatch(dst.data(), 8 * lane * block, 4096, f.bytes()) != -1)
        bad.fetch_add(1);
    });
    EXPECT_EQ(bad.load(), 0u);
    EXPECT_NO_THROW(ctl.check());
  }
}

// A deadline means no progress for that long, not a long queue: 48 lanes
// queue on one pair that holds one command at a time, each completion held
// back 15 ms, so the last lane waits about 720 ms for its turn, more than the
// 300 ms deadline (roomy for one command under a sanitizer on 2 busy cores).
// The queue moves all along: every read succeeds.
namespace {

// 48 lanes each read their own 8 blocks through one pair, every command
// faulted as `plan` says: how many failed, came back wrong, and how long
// it all took; the controller must still be healthy after.
struct slow_reads {
  unsigned failed = 0, wrong = 0;
  std::chrono::steady_clock::duration took{};
  std::uint64_t injected = 0;
};
// Every command faulted with `kind` for up to `hold_ns`.
fault_plan every_command(fault_kind kind, std::uint64_t hold_ns) {
  fault_plan plan;
  plan.kind = kind;
  plan.probability = 1;
  plan.hold_ns = hold_ns;
  plan.seed = 7;
  return plan;
}

slow_reads read_through_faults(const options& o, const fault_plan& plan) {
  pattern_file f(1 << 20);
  auto faults = std::make_shared<planned_faults>(plan);
  host_controller ctl(std::make_shared<backing_file>(f.path(), o.direct), o, 4096, faults);
  const queue_pair_ref qp = ctl.device_ref().queues.pick(0);  // a copy: the io_ref is a temporary
  std::atomic<unsigned> failed{0}, wrong{0};
  const auto t0 = std::chrono::steady_clock::now();
  test::run_lanes(48, [&](unsigned lane) {
    std::vector<std::byte> dst(4096);
    const nvme::status st = read_blocks(qp, 8 * lane, 8, dst.data());
    if (!st.success()) failed.fetch_add(1);
    else if (first_mismatch(dst.data(), 8 * lane * block, 4096, f.bytes()) != -1) wrong.fetch_add(1);
  });
  slow_reads r{failed.load(), wrong.load(), std::chrono::steady_clock::now() - t0,
               faults->injected()};
  EXPECT_NO_THROW(ctl.check());
  return r;
}

}  // namespace

// Reads through one pair of `depth` with every command faulted: every one
// completes right, and all take longer than `at_least` (else the test made
// no queue: `why`).
void expect_slow_not_stuck(std::uint32_t depth, std::uint64_t timeout_ns, fault_kind kind,
                           std::uint64_t hold_ns, std::chrono::milliseconds at_least,
                           const char* why) {
  options o = test_options(delivery::gpu_pull, 1, depth, 1);
  o.timeout_ns = timeout_ns;
  const slow_reads r = read_through_faults(o, every_command(kind, hold_ns));
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_GT(r.took, at_least) << why;
  EXPECT_EQ(r.injected, 48u);
}

TEST(HostControllerQueue, LongQueueIsSlowNotStuck) {
  expect_slow_not_stuck(2, 300'000'000ull, fault_kind::delay, 15'000'000ull,
                        std::chrono::milliseconds(600), "the queue was not as long as meant");
}

TEST(HostControllerQueue, CompletionsHeldPastTheDeadlineAreSlowNotStuck) {
  // Every completion is held a random 0 to 400 ms, the deadline is 100 ms:
  // most waiters wait past it while the pair keeps retiring others'
  // completions. Slow, not stuck: every read completes, right (a timeout
  // in wait() would fail the whole pair).
  expect_slow_not_stuck(64, 100'000'000ull, fault_kind::reorder, 400'000'000ull,
                        std::chrono::milliseconds(200), "no completion was held past the deadline");
}

TEST(HostControllerRaw, CompletionFieldsAndFullCompletionQueue) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(delivery::gpu_pull, 1, 4, 1));
  const queue_pair_ref& qp = ctl->queues().view(0);
  raw_queue q(qp);
  // Three commands fill the CQ (depth 4 holds at most 3 unretired entries).
  for (int i = 0; i < 3; ++i) q.push(nvme::make_flush(0, 1));
  q.ring_sq();
  for (std::uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(q.wait_phase(i, true)) << i;
    const nvme::completion& e = q.cqe(i);
    const std::uint32_t w = q.dw3(i);
    EXPECT_TRUE(nvme::dw3_status(w).success());
    EXPECT_EQ(e.sq_id, qp.qid);
    EXPECT_EQ(e.dw0, 0u);
    EXPECT_EQ(e.dw1, 0u);
    EXPECT_GE(e.sq_head, i + 1);  // the command itself was consumed
    EXPECT_LE(e.sq_head, 3u);
  }
  std::vector<std::uint16_t> cids{nvme::dw3_cid(q.dw3(0)), nvme::dw3_cid(q.dw3(1)),
                                  nvme::dw3_cid(q.dw3(2))};
  std::sort(cids.begin(), cids.end());
  EXPECT_EQ(cids, (std::vector<std::uint16_t>{0, 1, 2}));
  ASSERT_EQ(q.cqe(2).sq_head, 3);

  // Three more are consumed but must not be posted: the CQ is full.
  q.push(nvme::make_flush(0, 1));
  q.push(nvme::make_flush(0, 1));
  q.push(nvme::make_flush(0, 5));  // bad namespace, to see the status travel
  q.ring_sq();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(nvme::dw3_phase(q.dw3(3))) << "posted into a full CQ";
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(nvme::dw3_phase(q.dw3(i)));

  // Retiring makes room: entry 3 (phase 1), then 0 and 1 of the next pass (phase 0).
  q.retire(3);
  ASSERT_TRUE(q.wait_phase(3, true));
  ASSERT_TRUE(q.wait_phase(0, false));
  ASSERT_TRUE(q.wait_phase(1, false));
  EXPECT_TRUE(nvme::dw3_phase(q.dw3(2))) << "entry 2 overwritten while unretired";
  EXPECT_EQ(q.cqe(1).sq_head, 2);  // six consumed: index 6 mod 4
  int bad_namespace = 0;
  for (std::uint32_t i : {3u, 0u, 1u})
    if (nvme::dw3_status(q.dw3(i)).code() == 0x0B) ++bad_namespace;
  EXPECT_EQ(bad_namespace, 1);
  EXPECT_EQ(ctl->stats().commands, 6u);
  EXPECT_EQ(ctl->stats().errors, 1u);
  EXPECT_NO_THROW(ctl->check());
}

TEST(HostControllerRaw, BadDoorbellIsReportedByCheck) {
  pattern_file f(64 * block);
  auto ctl = make(f, test_options(delivery::gpu_pull, 1, 4, 1));
  const queue_pair_ref& qp = ctl->queues().view(0);
  detail::system_atomic<std::uint32_t>(*qp.sq_tail_doorbell)
      .store(9, detail::memory_order_release);  // beyond depth 4
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool raised = false;
  while (!raised && std::chrono::steady_clock::now() < end) {
    try {
      ctl->check();
      std::this_thread::yield();
    } catch (const runtime_error& e) {
      raised = true;
      EXPECT_NE(std::string(e.what()).find("doorbell"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(raised);
  EXPECT_EQ(ctl->stats().commands, 0u);
}

// O_DIRECT on the filesystem of the temp directory, if it supports it.
TEST(HostControllerDirect, AlignedReadsAndUnalignedRejected) {
  // Not a multiple of 4096, so the last line is partial under O_DIRECT too.
  const std::uint64_t size = (2 << 20) + 1000;
  pattern_file f(size);
  std::shared_ptr<backing_file> file;
  try {
    file = std::make_shared<backing_file>(f.path(), direct_io::on);
  } catch (const std::system_error& e) {
    GTEST_SKIP() << "O_DIRECT unavailable here: " << e.what();
  }
  ASSERT_TRUE(file->direct());
  const std::uint32_t align = file->direct_alignment();
  std::printf("[          ] O_DIRECT alignment %u\n", align);
  for (delivery d : {delivery::gpu_pull, delivery::copy_engine}) {
    options o = test_options(d, 2, 8, 1);
    o.direct = direct_io::on;
    host_controller ctl(file, o, 4096);
    const std::uint32_t align_blocks = std::max<std::uint32_t>(align / block, 1);
    random_reads(ctl, size, 4, 300, 8, align_blocks);
    const queue_pair_ref qp = ctl.device_ref().queues.pick(0);
    // The partial last line.
    const std::uint64_t capacity = file->capacity_blocks();
    const std::uint64_t last = (capacity - 1) / align_blocks * align_blocks;
    std::vector<std::byte> dst(4096, std::byte{0xCD});
    const std::uint32_t blocks = static_cast<std::uint32_t>(capacity - last);
    nvme::status st = read_blocks(qp, last, blocks, dst.data());
    ASSERT_TRUE(st.success()) << describe(st);
    EXPECT_EQ(first_mismatch(dst.data(), last * block, blocks * block, size), -1);
    if (align > block) {
      // Unaligned offset, then unaligned length away from the end.
      st = read_blocks(qp, 1, align_blocks, dst.data());
      EXPECT_EQ(st.code(), nvme::sc::invalid_field) << describe(st);
      st = read_blocks(qp, 0, 1, dst.data());
      EXPECT_EQ(st.code(), nvme::sc::invalid_field) << describe(st);
    }
    EXPECT_NO_THROW(ctl.check());
  }
}

// A block device named by WARPSTORE_TEST_BLOCK_DEVICE (read only; e.g. a
// loop device with 4096-byte sectors), checked against pread of the device.
TEST(HostControllerDirect, BlockDeviceFromEnvironment) {
  const char* dev = std::getenv("WARPSTORE_TEST_BLOCK_DEVICE");
  if (dev == nullptr || *dev == 0) GTEST_SKIP() << "WARPSTORE_TEST_BLOCK_DEVICE not set";
  auto file = std::make_shared<backing_file>(dev, direct_io::on);
  ASSERT_TRUE(file->direct());
  const std::uint32_t align = file->direct_alignment();
  const std::uint32_t align_blocks = align / block;
  std::printf("[          ] %s: %llu bytes, sector %u\n", dev,
              static_cast<unsigned long long>(file->size_bytes()), align);
  ASSERT_EQ(file->size_bytes() % align, 0u);
  const int ref = ::open(dev, O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ref, 0);
  for (delivery d : {delivery::gpu_pull, delivery::copy_engine}) {
    options o = test_options(d, 2, 8, 1);
    o.direct = direct_io::on;
    host_controller ctl(file, o, 4 * align);
    const queue_pair_ref qp = ctl.device_ref().queues.pick(0);
    std::mt19937_64 rng(7);
    std::vector<std::byte> got(4 * align), want(4 * align);
    for (int i = 0; i < 500; ++i) {
      const std::uint32_t blocks = align_blocks * static_cast<std::uint32_t>(1 + rng() % 4);
      const std::uint64_t slba =
          rng() % ((file->capacity_blocks() - blocks) / align_blocks + 1) * align_blocks;
      const nvme::status st = read_blocks(qp, slba, blocks, got.data());
      ASSERT_TRUE(st.success()) << describe(st) << " slba " << slba;
      ASSERT_EQ(::pread(ref, want.data(), blocks * block, static_cast<off_t>(slba * block)),
                static_cast<ssize_t>(blocks * block));
      ASSERT_EQ(std::memcmp(got.data(), want.data(), blocks * block), 0) << "slba " << slba;
    }
    if (align > block) {
      EXPECT_EQ(read_blocks(qp, 1, align_blocks, got.data()).code(), nvme::sc::invalid_field);
      EXPECT_EQ(read_blocks(qp, 0, 1, got.data()).code(), nvme::sc::invalid_field);
    }
    EXPECT_NO_THROW(ctl.check());
  }
  ::close(ref);
}

// Buffered WRITEs from several lanes on several queue pairs, neighbours
// submitted together: with the write thread (combine_writes) every WRITE goes
// through it, in no more pwritev calls than WRITEs, and the file holds every
// byte; without it the same bytes arrive through io_uring. A FLUSH after the
// writes completes; reads through the queues see the new bytes.
class HostControllerWrites : public ::testing::TestWithParam<bool> {};

TEST_P(HostControllerWrites, NeighbouringWritesLandWholeWithOrWithoutTheWriteThread) {
  const bool combine = GetParam();
  constexpr std::uint32_t lanes = 4, per_lane = 64, blocks = 8;  // 4 KiB per WRITE
  constexpr std::uint64_t bytes = std::uint64_t{lanes} * per_lane * blocks * block;
  pattern_file f(bytes);
  options o = test_options(delivery::gpu_pull, 4, 16, 2);
  o.combine_writes = combine;
  o.write_behind_bytes = 16 << 10;  // the write thread starts writeback as it goes
  auto ctl = std::make_unique<host_controller>(
      std::make_shared<backing_file>(f.path(), o.direct, file_access::read_write), o, 4096);
  const io_ref io = ctl->device_ref();
  auto value = [](std::uint64_t offset) { return static_cast<std::byte>((offset * 7 + 3) & 0xFF); };
  std::atomic<unsigned> bad{0};
  std::vector<std::thread> threads;
  for (std::uint32_t lane = 0; lane < lanes; ++lane)
    threads.emplace_back([&, lane] {
      // io_ref::write, as a warp of one: the lane's queue pair by thread.
      std::vector<std::byte> src(blocks * block);
      // Lane l writes WRITE k at slot k * lanes + l: neighbours come from
      // different lanes and queue pairs.
      for (std::uint32_t k = 0; k < per_lane; ++k) {
        const std::uint64_t slba = (std::uint64_t{k} * lanes + lane) * blocks;
        for (std::uint32_t i = 0; i < src.size(); ++i) src[i] = value(slba * block + i);
        if (!io.write(1u, true, io_request{slba, blocks, src.data()}).success()) ++bad;
      }
      if (!io.flush().success()) ++bad;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u);
  controller_stats s = ctl->stats();
  EXPECT_GT(s.sync_ns, 0u);  // the FLUSHes ran fdatasync
  if (combine) {
    EXPECT_EQ(s.combined_writes, std::uint64_t{lanes} * per_lane);
    EXPECT_GE(s.write_calls, 1u);
    EXPECT_LE(s.write_calls, s.combined_writes);
    EXPECT_GE(s.write_batches, 1u);
    EXPECT_LE(s.write_batches, s.write_calls);
    EXPECT_GT(s.write_ns, 0u);  // timed around its pwritev calls
    // 1 MiB written, writeback started every 16 KiB: the helper thread ran
    // (it runs apart from the writes: give it a moment).
    for (int i = 0; i < 500 && s.write_behind_starts == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = ctl->stats();
    }
    EXPECT_GE(s.write_behind_starts, 1u);
  } else {
    EXPECT_EQ(s.combined_writes, 0u);
    EXPECT_EQ(s.write_calls, 0u);
    EXPECT_EQ(s.write_ns, 0u);
    EXPECT_EQ(s.write_behind_starts, 0u);
  }
  // Through the queues, then on disk after the controller is gone.
  std::vector<std::byte> got(blocks * block);
  const queue_pair_ref qp = io.queues.pick(0);
  for (std::uint64_t slba = 0; slba < bytes / block; slba += blocks) {
    ASSERT_TRUE(read_blocks(qp, slba, blocks, got.data()).success());
    for (std::uint32_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], value(slba * block + i)) << "block " << slba << " byte " << i;
  }
  ctl.reset();
  std::vector<std::byte> file(bytes);
  const int fd = ::open(f.path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, file.data(), bytes, 0), static_cast<ssize_t>(bytes));
  ::close(fd);
  for (std::uint64_t i = 0; i < bytes; ++i) ASSERT_EQ(file[i], value(i)) << "byte " << i;
}

INSTANTIATE_TEST_SUITE_P(Combine, HostControllerWrites, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "write_thread" : "io_uring"; });

}  // namespace
}  // namespace warpstore
