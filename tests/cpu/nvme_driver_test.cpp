// The user-space NVMe driver core (src/controller/nvme_driver.h) against the
// software NVMe controller (src/controller/nvme_model.h): bring-up,
// identify, queue grants, I/O through PRPs and PRP lists checked byte for
// byte against the backing file, MDTS splitting, phase wraparound, and each
// misbehaviour of the model ending in a clear error, never a hang.
#include "controller/nvme_driver.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "controller/nvme_model.h"
#include "test_files.h"
#include "warpstore/error.h"
#include "warpstore/nvme.h"

namespace warpstore {
namespace {

namespace nm = nvme_model;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// The driver's register map is the model's (which tests it against the spec).
static_assert(nvme_reg::cap == nm::reg::cap && nvme_reg::vs == nm::reg::vs);
static_assert(nvme_reg::cc == nm::reg::cc && nvme_reg::csts == nm::reg::csts);
static_assert(nvme_reg::aqa == nm::reg::aqa && nvme_reg::asq == nm::reg::asq &&
              nvme_reg::acq == nm::reg::acq);
static_assert(nvme_reg::sq_tail_doorbell(5, 3) == nm::sq_tail_doorbell(5, 3));
static_assert(nvme_reg::cq_head_doorbell(5, 3) == nm::cq_head_doorbell(5, 3));
static_assert(nvme_reg::csts_shst_complete == nm::csts::shst_complete);

constexpr std::uint32_t page = 4096;
constexpr std::uint64_t default_file_bytes = 1 << 20;  // 2048 blocks

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t w = rng();
    std::memcpy(v.data() + i, &w, std::min<std::size_t>(8, n - i));
  }
  return v;
}

// Page-aligned host memory with room for an offset in front.
struct buffer {
  host_dma_memory mem;
  std::size_t bytes;
  std::byte* base;
  std::byte* at;  // `offset` bytes into the first page
  explicit buffer(std::size_t n, std::size_t offset = 0)
      : bytes(n),
        base(static_cast<std::byte*>(mem.alloc(n + offset + page, page))),
        at(base + offset) {}
  ~buffer() { mem.free(base); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
};

class NvmeDriver : public ::testing::Test {
 protected:
  void start(nm::config cfg, std::uint64_t file_bytes = default_file_bytes) {
    file_ = std::make_unique<test::pattern_file>(file_bytes);
    cfg.path = file_->path();
    dev_ = std::make_unique<nm::device>(cfg);
  }
  static nm::config model_config() {
    nm::config cfg;
    cfg.max_io_queues = 4;
    cfg.max_queue_entries = 256;
    cfg.ready_delay = 2ms;
    return cfg;
  }
  nvme_driver_options driver_options() const {
    nvme_driver_options o;
    o.name = "model";
    o.io_queues = 2;
    o.io_queue_entries = 64;
    o.admin_timeout = 2s;
    o.io_timeout = 2s;
    return o;
  }
  std::unique_ptr<nvme_driver> open(nvme_driver_options o) {
    return std::make_unique<nvme_driver>(nvme_bar{dev_->bar(), dev_->bar_bytes()}, mem_, o);
  }
  std::unique_ptr<nvme_driver> open() { return open(driver_options()); }
  std::uint32_t csts() const { return nm::read32(dev_->bar(), nm::reg::csts); }

  // Bytes of the backing file now.
  std::vector<std::byte> file_bytes_at(std::uint64_t offset, std::size_t n) const {
    return warpstore::test::file_bytes_at(file_->path(), offset, n);
  }

  // Writes `blocks` random blocks at `lba` from a buffer `offset` bytes into
  // its page, flushes, checks the file, reads them back into another
  // buffer at another offset and checks that.
  void round_trip(nvme_driver& d, std::uint16_t qid, std::uint64_t lba, std::uint64_t blocks,
                  std::size_t offset, std::uint64_t seed) {
    const std::size_t n = blocks * 512;
    const auto data = random_bytes(n, seed);
    buffer out(n, offset);
    std::memcpy(out.at, data.data(), n);
    d.write_blocks(qid, lba, blocks, out.at);
    d.flush(qid);
    EXPECT_EQ(file_bytes_at(lba * 512, n), data)
        << blocks << " blocks at LBA " << lba << ", buffer offset " << offset;
    buffer in(n, (offset + 1028) % page);
    d.read_blocks(qid, lba, blocks, in.at);
    EXPECT_EQ(std::memcmp(in.at, data.data(), n), 0)
        << blocks << " blocks at LBA " << lba << " read back";
  }

  host_dma_memory mem_;
  std::unique_ptr<test::pattern_file> file_;
  std::unique_ptr<nm::device> dev_;
};

TEST_F(NvmeDriver, BringUpIdentifyAndShutdown) {
  start(model_config());
  auto d = open();
  const nvme_capabilities& cap = d->capabilities();
  EXPECT_EQ(cap.max_queue_entries, 256u);
  EXPECT_EQ(cap.doorbell_stride, 0u);
  EXPECT_EQ(cap.ready_timeout, 1000ms);
  EXPECT_TRUE(cap.contiguous_queues_required);

  const nvme_identity& id = d->identity();
  EXPECT_EQ(id.vendor_id, nm::device::vendor_id);
  EXPECT_EQ(id.serial, nm::device::serial);
  EXPECT_EQ(id.model, nm::device::model_name);
  EXPECT_EQ(id.firmware, "1.0");
  EXPECT_EQ(id.version, 0x00010400u);
  EXPECT_EQ(id.mdts_bytes, std::uint64_t{page} << 5);  // the model's default MDTS 5
  EXPECT_EQ(id.namespaces, 1u);
  EXPECT_EQ(id.block_size, 512u);
  EXPECT_EQ(id.blocks, dev_->blocks());
  EXPECT_EQ(id.blocks, default_file_bytes / 512);
  EXPECT_EQ(d->max_transfer_bytes(), std::uint64_t{page} << 5);

  // CC as 3.1.5 wants it: enabled, NVM, 4 KiB pages, 64/16-byte entries.
  const std::uint32_t cc = nm::read32(dev_->bar(), nm::reg::cc);
  EXPECT_EQ(cc, 1u | (6u << 16) | (4u << 20));
  EXPECT_EQ(csts(), nm::csts::rdy);

  EXPECT_EQ(d->granted_queues(), 2u);
  ASSERT_EQ(d->queue_pairs().size(), 2u);
  for (std::uint16_t i = 0; i < 2; ++i) {
    const nvme_queue_pair& p = d->queue_pairs()[i];
    EXPECT_EQ(p.qid, i + 1);
    EXPECT_EQ(p.entries, 64u);
    EXPECT_EQ(p.sq_iova, reinterpret_cast<std::uint64_t>(p.sq));
    EXPECT_EQ(p.cq_iova, reinterpret_cast<std::uint64_t>(p.cq));
    EXPECT_EQ(p.sq_iova % page, 0u);
    EXPECT_EQ(p.cq_iova % page, 0u);
    EXPECT_EQ(reinterpret_cast<std::byte*>(p.sq_tail_doorbell),
              dev_->bar() + nm::sq_tail_doorbell(p.qid, 0));
    EXPECT_EQ(reinterpret_cast<std::byte*>(p.cq_head_doorbell),
              dev_->bar() + nm::cq_head_doorbell(p.qid, 0));
  }
  // Identify x2, Set Features, 2 x (Create CQ + Create SQ).
  EXPECT_EQ(dev_->counters().commands, 7u);
  EXPECT_EQ(dev_->counters().completions, 7u);

  const nvme_shutdown_report r = d->shutdown();
  EXPECT_TRUE(r.clean()) << r.problems;
  EXPECT_TRUE(r.queues_deleted);
  EXPECT_TRUE(r.shutdown_complete);
  EXPECT_FALSE(r.disabled);
  EXPECT_EQ(r.problems, "");
  EXPECT_EQ(csts() & nm::csts::shst_mask, nm::csts::shst_complete);
  EXPECT_EQ(nm::read32(dev_->bar(), nm::reg::cc) & nvme_reg::cc_shn_mask, nvme_reg::cc_shn_normal);
  // + 2 x (Delete SQ + Delete CQ).
  EXPECT_EQ(dev_->counters().commands, 11u);
  EXPECT_EQ(dev_->counters().completions, 11u);
  // A second call reports the first; I/O after shutdown is refused.
  EXPECT_TRUE(d->shutdown().clean());
  buffer b(512);
  EXPECT_THROW(d->read_blocks(1, 0, 1, b.at), logic_error);
  d.reset();  // the destructor does nothing more
  EXPECT_EQ(dev_->counters().commands, 11u);
}

// The destructor shuts down by itself, and a bring-up on a controller left
// shut down (enabled) starts with a reset.
TEST_F(NvmeDriver, DestructorShutsDownAndBringUpResets) {
  start(model_config());
  open().reset();
  EXPECT_EQ(csts() & nm::csts::shst_mask, nm::csts::shst_complete);
  auto d = open();
  EXPECT_EQ(dev_->counters().resets, 1u);
  round_trip(*d, 1, 3, 2, 0, 1);
}

TEST_F(NvmeDriver, GrantedQueuesStopAtTheModelsMaximum) {
  nm::config cfg = model_config();
  cfg.max_io_queues = 3;
  cfg.max_queue_entries = 32;
  start(cfg);
  nvme_driver_options o = driver_options();
  o.io_queues = 8;
  o.io_queue_entries = 100000;  // clamped to MQES + 1
  auto d = open(o);
  EXPECT_EQ(d->granted_queues(), 3u);
  ASSERT_EQ(d->queue_pairs().size(), 3u);
  for (const nvme_queue_pair& p : d->queue_pairs()) {
    EXPECT_EQ(p.entries, 32u);
    round_trip(*d, p.qid, 100 + p.qid * 10, 3, 0, p.qid);
  }
  buffer b(512);
  EXPECT_THROW(d->read_blocks(4, 0, 1, b.at), invalid_argument);
  EXPECT_THROW(d->read_blocks(0, 0, 1, b.at), invalid_argument);
  EXPECT_TRUE(d->shutdown().clean());
}

TEST_F(NvmeDriver, DoorbellStride) {
  nm::config cfg = model_config();
  cfg.dstrd = 2;
  start(cfg);
  auto d = open();
  EXPECT_EQ(d->capabilities().doorbell_stride, 2u);
  const nvme_queue_pair& p = d->queue_pairs()[1];
  EXPECT_EQ(reinterpret_cast<std::byte*>(p.sq_tail_doorbell), dev_->bar() + 0x1000 + 4 * 16);
  EXPECT_EQ(reinterpret_cast<std::byte*>(p.cq_head_doorbell), dev_->bar() + 0x1000 + 5 * 16);
  round_trip(*d, 2, 77, 5, 0, 3);
  EXPECT_TRUE(d->shutdown().clean());
}

// PRP1 alone, PRP1 + PRP2, and PRP lists; buffers on and off page starts.
TEST_F(NvmeDriver, ReadWriteFlushRoundTrip) {
  start(model_config());
  auto d = open();
  std::uint64_t seed = 10;
  for (std::uint64_t blocks : {1, 8, 9, 16, 17, 64})
    for (std::size_t offset : {0, 4, 512, 2052})
      for (std::uint64_t lba : {1, 333, 2047 - 64}) round_trip(*d, 1, lba, blocks, offset, seed++);
  // The last block of the namespace; one beyond it is refused here.
  round_trip(*d, 2, 2047, 1, 0, seed++);
  buffer b(1024);
  EXPECT_THROW(d->read_blocks(1, 2047, 2, b.at), invalid_argument);
  EXPECT_THROW(d->read_blocks(1, 1, 1, b.at + 2), invalid_argument);  // PRP1 not dword aligned
  d->read_blocks(1, 1, 0, b.at);                                      // nothing to do
  EXPECT_EQ(d->stale_completions(), 0u);
  EXPECT_TRUE(d->shutdown().clean());
}

// Transfers beyond MDTS are split into commands of MDTS each.
TEST_F(NvmeDriver, TransfersBeyondMdtsAreSplit) {
  nm::config cfg = model_config();
  cfg.mdts = 1;  // 8 KiB
  start(cfg);
  auto d = open();
  EXPECT_EQ(d->identity().mdts_bytes, 8192u);
  EXPECT_EQ(d->max_transfer_bytes(), 8192u);
  const std::uint64_t before = dev_->counters().commands;
  round_trip(*d, 1, 5, 100, 4, 42);  // 50 KiB: 7 commands each way, and a FLUSH
  EXPECT_EQ(dev_->counters().commands - before, 7u + 1u + 7u);
  EXPECT_TRUE(d->shutdown().clean());
}

// Without MDTS, one command of up to 8 MiB: its PRP list spans list pages
// chained through their last entries.
TEST_F(NvmeDriver, PrpListsChainAcrossListPages) {
  nm::config cfg = model_config();
  cfg.mdts = 0;
  start(cfg, 12u << 20);
  auto d = open();
  EXPECT_EQ(d->identity().mdts_bytes, 0u);
  EXPECT_EQ(d->max_transfer_bytes(), 8u << 20);
  std::uint64_t before = dev_->counters().commands;
  round_trip(*d, 1, 9, (3u << 20) / 512, 1028, 7);  // 769 pages: two list pages
  EXPECT_EQ(dev_->counters().commands - before, 3u);
  before = dev_->counters().commands;
  round_trip(*d, 1, 11, (8u << 20) / 512 + 3, 0, 8);  // 8 MiB + 3 blocks: two commands
  EXPECT_EQ(dev_->counters().commands - before, 5u);
  EXPECT_TRUE(d->shutdown().clean());
}

// 10000 commands through a 4-entry queue pair: the phase tag of the I/O CQ
// flips 2500 times (and the 2-entry admin CQ's a few times).
TEST_F(NvmeDriver, WraparoundFlipsThePhase) {
  start(model_config());
  nvme_driver_options o = driver_options();
  o.io_queue_entries = 4;
  o.admin_queue_entries = 2;
  o.io_queues = 1;
  auto d = open(o);
  ASSERT_EQ(d->queue_pairs()[0].entries, 4u);
  buffer b(512), r(512);
  constexpr std::uint32_t rounds = 5000;
  for (std::uint32_t i = 0; i < rounds; ++i) {
    const std::uint64_t lba = (i * 7919u) % 2048;
    for (std::size_t k = 0; k < 512; k += 4) {
      const std::uint32_t w = i * 1000003u + static_cast<std::uint32_t>(k);
      std::memcpy(b.at + k, &w, 4);
    }
    d->write_blocks(1, lba, 1, b.at);
    d->read_blocks(1, lba, 1, r.at);
    ASSERT_EQ(std::memcmp(b.at, r.at, 512), 0) << "command " << i;
  }
  EXPECT_EQ(dev_->counters().completions, 5u + 2u * rounds);
  EXPECT_EQ(dev_->counters().invalid_doorbells, 0u);
  EXPECT_EQ(d->stale_completions(), 0u);
  EXPECT_TRUE(d->shutdown().clean());
}

// An injected error status comes back as an io error naming the command,
// the status and the controller; the queue works on afterwards.
TEST_F(NvmeDriver, ErrorStatusIsRaisedWithItsName) {
  start(model_config());
  auto d = open();
  nm::faults f;
  f.fail_next = 1;
  dev_->inject(f);
  buffer b(8 * 512);
  try {
    d->read_blocks(1, 17, 8, b.at);
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::io);
    EXPECT_EQ(e.status().raw, f.fail_status.raw);
    EXPECT_EQ(e.info().lba.value_or(0), 17u);
    EXPECT_EQ(e.path(), "model");
    EXPECT_EQ(std::string(e.what()),
              "nvme model: READ of 8 blocks at LBA 17 on queue 1: unrecovered read error "
              "(sct 0x2, sc 0x81)");
  }
  // A retryable status (DNR clear) says so.
  f = {};
  f.namespace_not_ready = true;
  dev_->inject(f);
  try {
    d->write_blocks(2, 3, 1, b.at);
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::io);
    EXPECT_NE(std::string(e.what()).find("WRITE of 1 block at LBA 3 on queue 2: namespace not "
                                         "ready (sct 0x0, sc 0x82), DNR clear"),
              std::string::npos)
        << e.what();
  }
  dev_->inject({});
  round_trip(*d, 1, 17, 8, 0, 5);
  // An admin command the controller refuses.
  nvme::command c{};
  c.opc = 0x7F;
  try {
    d->admin(c, "Vendor 7Fh");
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "nvme model: Vendor 7Fh: invalid opcode (sct 0x0, sc 0x01)");
  }
  EXPECT_TRUE(d->shutdown().clean());
}

// A dropped completion: the deadline fires with "no completion", no hang;
// a late one (delayed beyond the deadline) is retired and ignored later.
TEST_F(NvmeDriver, MissingCompletionHitsTheDeadline) {
  start(model_config());
  nvme_driver_options o = driver_options();
  o.io_timeout = 100ms;
  auto d = open(o);
  nm::faults f;
  f.drop_next = 1;
  dev_->inject(f);
  buffer b(512);
  const auto t0 = clock_type::now();
  try {
    d->read_blocks(1, 40, 1, b.at);
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::deadline);
    EXPECT_TRUE(e.status().is_deadline());
    EXPECT_EQ(std::string(e.what()),
              "nvme model: no completion for READ of 1 block at LBA 40 on queue 1 within "
              "100 ms; the command is abandoned (a late completion will be ignored)");
  }
  EXPECT_LT(clock_type::now() - t0, 1500ms);
  EXPECT_EQ(dev_->counters().dropped, 1u);
  round_trip(*d, 1, 40, 1, 0, 9);

  f = {};
  f.delay = 300ms;
  dev_->inject(f);
  EXPECT_THROW(d->read_blocks(1, 41, 1, b.at), runtime_error);
  dev_->inject({});
  std::this_thread::sleep_for(400ms);  // the late completion is posted
  round_trip(*d, 1, 42, 1, 0, 10);
  EXPECT_EQ(d->stale_completions(), 1u);
  EXPECT_TRUE(d->shutdown().clean());
}

// CSTS.CFS while waiting: raised at once, not after the timeout; the
// shutdown then skips the queues and disables the controller.
TEST_F(NvmeDriver, ControllerFatalStatus) {
  start(model_config());
  auto d = open();  // I/O timeout 2 s
  nm::faults f;
  f.fatal = true;
  dev_->inject(f);
  buffer b(512);
  const auto t0 = clock_type::now();
  try {
    for (int i = 0; i < 100; ++i) d->read_blocks(1, 1, 1, b.at);  // CFS comes within a round
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::runtime);
    EXPECT_NE(std::string(e.what()).find("nvme model: controller fatal status (CSTS.CFS) while "
                                         "waiting for READ of 1 block at LBA 1 on queue 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(clock_type::now() - t0, 1500ms);
  const nvme_shutdown_report r = d->shutdown();
  EXPECT_FALSE(r.clean());
  EXPECT_FALSE(r.queues_deleted);
  EXPECT_TRUE(r.disabled);
  EXPECT_NE(r.problems.find("controller fatal status"), std::string::npos) << r.problems;
  EXPECT_EQ(csts(), 0u);
}

// A bring-up step the controller refuses (a namespace it lacks): the error
// names the step and the status, and the controller is left disabled.
TEST_F(NvmeDriver, RefusedBringUpStepIsNamedAndDisables) {
  start(model_config());
  nvme_driver_options o = driver_options();
  o.nsid = 2;
  try {
    open(o);
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::io);
    EXPECT_EQ(std::string(e.what()),
              "nvme model: Identify Namespace 2: invalid namespace (sct 0x0, sc 0x0b)");
  }
  EXPECT_EQ(nm::read32(dev_->bar(), nm::reg::cc) & nm::cc::en, 0u);
  EXPECT_EQ(csts() & nm::csts::rdy, 0u);
  // A new driver brings it up again.
  auto d = open();
  round_trip(*d, 1, 6, 1, 0, 11);
}

// A controller that does not become ready within CAP.TO: a deadline error
// from the constructor, with the controller disabled again.
TEST_F(NvmeDriver, NeverReadyTimesOut) {
  nm::config cfg = model_config();
  cfg.timeout_500ms = 1;
  cfg.ready_delay = 300ms;  // the driver waits 500 ms: ready in time
  start(cfg);
  EXPECT_NO_THROW(open());
  cfg.ready_delay = 800ms;  // beyond CAP.TO
  start(cfg);
  const auto t0 = clock_type::now();
  try {
    open();
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(e.kind(), error_kind::deadline);
    EXPECT_NE(std::string(e.what()).find("nvme model: CSTS.RDY did not become 1 within CAP.TO "
                                         "(500 ms) while enabling (CC.EN = 1)"),
              std::string::npos)
        << e.what();
  }
  // 500 ms for RDY 1; RDY never went 1, so the disable that follows finds
  // it 0 at once.
  EXPECT_GE(clock_type::now() - t0, 500ms);
  EXPECT_LT(clock_type::now() - t0, 2000ms);
  EXPECT_EQ(nm::read32(dev_->bar(), nm::reg::cc) & nm::cc::en, 0u);
}

// Register files the driver cannot use: a CAP without the NVM command set,
// and registers reading all ones (a device gone). A plain array stands in
// for BAR0; nothing answers it.
TEST_F(NvmeDriver, UnusableRegistersAreRefused) {
  nvme_driver_options o = driver_options();
  std::vector<std::uint64_t> fake(0x2000 / 8, 0);
  fake[0] = 0xFFull | (std::uint64_t{2} << 24);  // MQES 255, TO 2, CSS 0
  try {
    nvme_driver d(nvme_bar{reinterpret_cast<std::byte*>(fake.data()), 0x2000}, mem_, o);
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "nvme model: CAP.CSS 0x0 lacks the NVM command set");
  }
  std::fill(fake.begin(), fake.end(), ~std::uint64_t{0});
  try {
    nvme_driver d(nvme_bar{reinterpret_cast<std::byte*>(fake.data()), 0x2000}, mem_, o);
    FAIL() << "no error";
  } catch (const runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("registers read all ones"), std::string::npos);
  }
}

}  // namespace
}  // namespace warpstore
