// The software NVMe controller (src/controller/nvme_model.h) driven the way
// a real driver drives a device: registers, the bring-up sequence, admin
// commands, I/O queues, PRPs, phase tags, and every error a device enforces,
// checked status for status and byte for byte against the backing file.
#include "controller/nvme_model.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/pattern_file.h"
#include "test_files.h"
#include "warpstore/error.h"
#include "warpstore/nvme.h"

namespace warpstore {
namespace {

namespace nm = nvme_model;
using namespace std::chrono_literals;

constexpr std::uint32_t page = nm::device::page_size;
constexpr std::uint64_t file_bytes = 1 << 20;  // 2048 blocks
constexpr std::uint64_t file_blocks = file_bytes / nvme::block_size;

// Zeroed, page-aligned host memory: queues, PRP lists, data buffers.
class host_memory {
 public:
  explicit host_memory(std::size_t bytes)
      : bytes_((bytes + page - 1) / page * page),
        p_(static_cast<std::byte*>(std::aligned_alloc(page, bytes_))) {
    std::memset(p_.get(), 0, bytes_);
  }
  std::byte* get() const { return p_.get(); }
  std::uint64_t addr(std::size_t offset = 0) const {
    return reinterpret_cast<std::uint64_t>(p_.get() + offset);
  }
  std::size_t size() const { return bytes_; }

 private:
  struct free_it {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::size_t bytes_;
  std::unique_ptr<std::byte, free_it> p_;
};

nvme::status status_of(const nvme::completion& e) {
  return nvme::status{static_cast<std::uint16_t>(e.status >> 1)};
}
std::string text(nvme::status s) {
  return describe(s) + " raw " + std::to_string(s.raw);
}
constexpr nvme::status generic(std::uint8_t code, bool dnr = true) {
  return nvme::status::make(nvme::status_type::generic, code, dnr);
}
constexpr nvme::status specific(std::uint8_t code) {
  return nvme::status::make(nvme::status_type::command_specific, code);
}

#define EXPECT_STATUS(got, want) \
  EXPECT_EQ((got).raw, (want).raw) << text(got) << " want " << text(want)

// A minimal NVMe driver: what a kernel driver does, with host virtual
// addresses for DMA. One queue is the admin queue; I/O queues come from
// create_queue_pair. It tracks the SQ head from completions, so it never
// overfills an SQ.
class driver {
 public:
  struct queue {
    std::uint16_t qid = 0;
    std::uint32_t size = 0;     // SQ entries
    std::uint32_t cq_size = 0;  // CQ entries
    std::unique_ptr<host_memory> sq, cq;
    std::uint32_t tail = 0;     // next SQ slot
    std::uint32_t sq_head = 0;  // as the last CQE reported it
    std::uint32_t cq_head = 0;
    bool phase = true;
    std::uint16_t next_cid = 0;
    std::uint64_t phase_flips = 0;
    nvme::command* sqe() const { return reinterpret_cast<nvme::command*>(sq->get()); }
    nvme::completion* cqe() const { return reinterpret_cast<nvme::completion*>(cq->get()); }
  };

  explicit driver(nm::device& dev) : dev_(dev), bar_(dev.bar()) {
    const std::uint64_t cap = nm::read64(bar_, nm::reg::cap);
    mqes_ = static_cast<std::uint32_t>(cap & 0xFFFF) + 1;
    dstrd_ = static_cast<std::uint32_t>((cap >> 32) & 0xF);
    timeout_ = std::chrono::milliseconds(500 * ((cap >> 24) & 0xFF));
  }

  std::uint32_t csts() const { return nm::read32(bar_, nm::reg::csts); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Waits (up to CAP.TO) until CSTS & mask == value.
  bool wait_csts(std::uint32_t mask, std::uint32_t value) const {
    const auto end = std::chrono::steady_clock::now() + timeout_;
    while (std::chrono::steady_clock::now() < end) {
      if ((csts() & mask) == value) return true;
      std::this_thread::sleep_for(50us);
    }
    return false;
  }
  void set_cc(std::uint32_t v) { nm::write32(bar_, nm::reg::cc, v); }
  std::uint32_t cc() const { return nm::read32(bar_, nm::reg::cc); }
  static constexpr std::uint32_t cc_enabled =
      nm::cc::en | (6u << nm::cc::iosqes_shift) | (4u << nm::cc::iocqes_shift);

  // Disable, wait RDY 0, admin queues, enable, wait RDY 1 (within CAP.TO).
  void enable(std::uint32_t admin_entries = 8) {
    set_cc(0);
    ASSERT_TRUE(wait_csts(nm::csts::rdy, 0)) << "RDY still 1 after CC.EN = 0";
    admin_ = make_queue(0, admin_entries);
    nm::write32(bar_, nm::reg::aqa, (admin_entries - 1) | ((admin_entries - 1) << 16));
    nm::write64(bar_, nm::reg::asq, admin_.sq->addr());
    nm::write64(bar_, nm::reg::acq, admin_.cq->addr());
    set_cc(cc_enabled);
    ASSERT_TRUE(wait_csts(nm::csts::rdy | nm::csts::cfs, nm::csts::rdy))
        << "not ready within CAP.TO, CSTS " << csts();
  }

  queue make_queue(std::uint16_t qid, std::uint32_t entries) {
    queue q;
    q.qid = qid;
    q.size = entries;
    q.cq_size = entries;
    q.sq = std::make_unique<host_memory>(std::size_t{entries} * sizeof(nvme::command));
    q.cq = std::make_unique<host_memory>(std::size_t{entries} * sizeof(nvme::completion));
    return q;
  }

  bool sq_full(const queue& q) const { return (q.tail + 1) % q.size == q.sq_head; }
  // Writes `c` (with the next cid) into the SQ and rings the tail doorbell
  // (unless `ring` is false: ring_sq later rings once for several).
  std::uint16_t submit(queue& q, nvme::command c, bool ring = true) {
    c.cid = q.next_cid++;
    q.sqe()[q.tail] = c;
    q.tail = (q.tail + 1) % q.size;
    if (ring) ring_sq(q);
    return c.cid;
  }
  void ring_sq(const queue& q) { nm::write32(bar_, nm::sq_tail_doorbell(q.qid, dstrd_), q.tail); }
  std::uint32_t dw3(const queue& q, std::uint32_t index) const {
    return std::atomic_ref<std::uint32_t>(
               *reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(q.cqe() + index) +
                                                 offsetof(nvme::completion, cid)))
        .load(std::memory_order_acquire);
  }
  // The next CQE (phase matches), retired and its head rung if `ring`;
  // nullopt if none came within `limit`.
  std::optional<nvme::completion> next(queue& q, std::chrono::microseconds limit = 5s,
                                       bool ring = true) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (nvme::dw3_phase(dw3(q, q.cq_head)) != q.phase) {
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      std::this_thread::yield();
    }
    const nvme::completion e = q.cqe()[q.cq_head];
    q.sq_head = e.sq_head;
    if (++q.cq_head == q.cq_size) {
      q.cq_head = 0;
      q.phase = !q.phase;
      ++q.phase_flips;
    }
    if (ring) ring_cq(q);
    return e;
  }
  void ring_cq(const queue& q) {
    nm::write32(bar_, nm::cq_head_doorbell(q.qid, dstrd_), q.cq_head);
  }

  // One command, waited for. A missing completion fails the test.
  nvme::completion run(queue& q, const nvme::command& c) {
    const std::uint16_t cid = submit(q, c);
    const auto e = next(q);
    EXPECT_TRUE(e.has_value()) << "no completion for opcode " << unsigned{c.opc};
    if (!e) return nvme::completion{0, 0, 0, 0, 0, 0xFFFE};
    EXPECT_EQ(e->cid, cid);
    EXPECT_EQ(e->sq_id, q.qid);
    return *e;
  }
  nvme::completion admin(const nvme::command& c) { return run(admin_, c); }

  static nvme::command identify(std::uint32_t cns, std::uint32_t nsid, std::uint64_t buf) {
    nvme::command c{};
    c.opc = static_cast<std::uint8_t>(nvme::admin_opcode::identify);
    c.nsid = nsid;
    c.prp1 = buf;
    c.cdw10 = cns;
    return c;
  }
  static nvme::command set_queues(std::uint32_t sqs, std::uint32_t cqs) {
    nvme::command c{};
    c.opc = static_cast<std::uint8_t>(nvme::admin_opcode::set_features);
    c.cdw10 = 0x07;
    c.cdw11 = ((sqs - 1) & 0xFFFF) | ((cqs - 1) << 16);
    return c;
  }
  static nvme::command create_cq(std::uint32_t qid, std::uint32_t entries, std::uint64_t base) {
    nvme::command c{};
    c.opc = static_cast<std::uint8_t>(nvme::admin_opcode::create_io_cq);
    c.prp1 = base;
    c.cdw10 = qid | ((entries - 1) << 16);
    c.cdw11 = 1;  // physically contiguous, no interrupts
    return c;
  }
  static nvme::command create_sq(std::uint32_t qid, std::uint32_t entries, std::uint64_t base,
                                 std::uint32_t cqid) {
    nvme::command c{};
    c.opc = static_cast<std::uint8_t>(nvme::admin_opcode::create_io_sq);
    c.prp1 = base;
    c.cdw10 = qid | ((entries - 1) << 16);
    c.cdw11 = 1 | (cqid << 16);
    return c;
  }
  static nvme::command delete_queue(nvme::admin_opcode op, std::uint32_t qid) {
    nvme::command c{};
    c.opc = static_cast<std::uint8_t>(op);
    c.cdw10 = qid;
    return c;
  }

  // An I/O queue pair qid (SQ and CQ both `qid`), created on the device.
  queue create_queue_pair(std::uint16_t qid, std::uint32_t sq_entries,
                          std::uint32_t cq_entries = 0) {
    if (cq_entries == 0) cq_entries = sq_entries;
    queue q = make_queue(qid, sq_entries);
    q.cq = std::make_unique<host_memory>(std::size_t{cq_entries} * sizeof(nvme::completion));
    q.cq_size = cq_entries;
    EXPECT_STATUS(status_of(admin(create_cq(qid, cq_entries, q.cq->addr()))), nvme::status::ok());
    EXPECT_STATUS(status_of(admin(create_sq(qid, sq_entries, q.sq->addr(), qid))),
                  nvme::status::ok());
    return q;
  }

  std::uint32_t mqes() const { return mqes_; }
  queue& admin_queue() { return admin_; }

 private:
  nm::device& dev_;
  std::byte* bar_;
  std::uint32_t mqes_ = 0;
  std::uint32_t dstrd_ = 0;
  std::chrono::milliseconds timeout_{0};
  queue admin_;
};

nvme::command rw(nvme::opcode op, std::uint64_t slba, std::uint32_t blocks, std::uint64_t prp1,
                 std::uint64_t prp2 = 0) {
  nvme::command c = nvme::make_rw(op, 0, 1, slba, blocks, prp1);
  c.prp2 = prp2;
  return c;
}

class NvmeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::make_unique<test::pattern_file>(file_bytes);
    dev_ = std::make_unique<nm::device>(device_config());
    drv_ = std::make_unique<driver>(*dev_);
  }
  virtual nm::config device_config() {
    nm::config cfg;
    cfg.path = file_->path();
    cfg.max_io_queues = 4;
    cfg.max_queue_entries = 256;
    cfg.ready_delay = 2ms;
    return cfg;
  }
  // enable, Identify, Set Features, and one I/O queue pair 1 of `entries`.
  void bring_up(std::uint32_t entries = 16, std::uint32_t cq_entries = 0) {
    drv_->enable();
    ASSERT_FALSE(HasFatalFailure());
    host_memory id(page);
    ASSERT_TRUE(status_of(drv_->admin(driver::identify(1, 0, id.addr()))).success());
    ASSERT_TRUE(status_of(drv_->admin(driver::identify(0, 1, id.addr()))).success());
    ASSERT_TRUE(status_of(drv_->admin(driver::set_queues(4, 4))).success());
    io_ = drv_->create_queue_pair(1, entries, cq_entries);
  }
  // Bytes of the backing file now.
  std::vector<std::byte> file_bytes_at(std::uint64_t offset, std::size_t n) const {
    return warpstore::test::file_bytes_at(file_->path(), offset, n);
  }

  std::unique_ptr<test::pattern_file> file_;
  std::unique_ptr<nm::device> dev_;
  std::unique_ptr<driver> drv_;
  driver::queue io_;
};

TEST_F(NvmeModel, RegistersAfterReset) {
  const std::byte* bar = dev_->bar();
  EXPECT_GE(dev_->bar_bytes(), 16384u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(bar) % page, 0u);
  const std::uint64_t cap = nm::read64(bar, nm::reg::cap);
  EXPECT_EQ(cap & 0xFFFF, 255u);      // MQES, 0-based
  EXPECT_EQ((cap >> 16) & 1, 1u);     // CQR
  EXPECT_EQ((cap >> 24) & 0xFF, 2u);  // TO, 500 ms units
  EXPECT_EQ((cap >> 32) & 0xF, 0u);   // DSTRD
  EXPECT_EQ((cap >> 37) & 0xFF, 1u);  // CSS: NVM command set
  EXPECT_EQ((cap >> 48) & 0xFF, 0u);  // MPSMIN = MPSMAX = 4 KiB
  EXPECT_EQ(nm::read32(bar, nm::reg::vs), 0x00010400u);
  EXPECT_EQ(nm::read32(bar, nm::reg::csts), 0u);
  EXPECT_EQ(dev_->blocks(), file_blocks);
  EXPECT_EQ(nm::sq_tail_doorbell(3, 0), 0x1018u);
  EXPECT_EQ(nm::cq_head_doorbell(3, 2), 0x1000u + 7u * 16u);
}

TEST_F(NvmeModel, BringUpIdentifyAndQueues) {
  drv_->enable();
  ASSERT_FALSE(HasFatalFailure());
  host_memory id(page);
  // Identify controller.
  EXPECT_STATUS(status_of(drv_->admin(driver::identify(1, 0, id.addr()))), nvme::status::ok());
  std::uint16_t vid;
  std::memcpy(&vid, id.get(), 2);
  EXPECT_EQ(vid, nm::device::vendor_id);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(id.get()) + 4, 20), "WARPSTORE-MODEL-0001");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(id.get()) + 24, 29),
            "warpstore software NVMe model");
  EXPECT_EQ(static_cast<char>(id.get()[24 + 29]), ' ');  // space padded
  EXPECT_EQ(static_cast<unsigned>(id.get()[77]), 5u);    // MDTS
  EXPECT_EQ(static_cast<unsigned>(id.get()[512]), 0x66u);
  EXPECT_EQ(static_cast<unsigned>(id.get()[513]), 0x44u);
  std::uint32_t nn;
  std::memcpy(&nn, id.get() + 516, 4);
  EXPECT_EQ(nn, 1u);
  // Identify namespace 1.
  EXPECT_STATUS(status_of(drv_->admin(driver::identify(0, 1, id.addr()))), nvme::status::ok());
  std::uint64_t nsze, ncap;
  std::memcpy(&nsze, id.get(), 8);
  std::memcpy(&ncap, id.get() + 8, 8);
  EXPECT_EQ(nsze, file_blocks);
  EXPECT_EQ(ncap, file_blocks);
  EXPECT_EQ(static_cast<unsigned>(id.get()[25]), 0u);  // NLBAF
  EXPECT_EQ(static_cast<unsigned>(id.get()[26]), 0u);  // FLBAS
  std::uint32_t lbaf0;
  std::memcpy(&lbaf0, id.get() + 128, 4);
  EXPECT_EQ((lbaf0 >> 16) & 0xFF, 9u);  // 512-byte blocks
  // Set Features, number of queues: asks 64, gets the model's 4 (0-based in DW0).
  const auto granted = drv_->admin(driver::set_queues(64, 2));
  EXPECT_STATUS(status_of(granted), nvme::status::ok());
  EXPECT_EQ(granted.dw0, 3u | (1u << 16));
  auto q1 = drv_->create_queue_pair(1, 16);
  auto q2 = drv_->create_queue_pair(2, 32);
  // A queue past the granted two CQs.
  host_memory cq3(page);
  EXPECT_STATUS(status_of(drv_->admin(driver::create_cq(3, 8, cq3.addr()))),
                specific(nvme::sc::invalid_queue_identifier));
  // Both pairs work.
  host_memory buf(page);
  EXPECT_STATUS(status_of(drv_->run(q1, rw(nvme::opcode::read, 3, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), 3 * 512, 512), 0u);
  EXPECT_STATUS(status_of(drv_->run(q2, rw(nvme::opcode::read, 9, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), 9 * 512, 512), 0u);
}

TEST_F(NvmeModel, ReadWriteFlushAgainstTheFile) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  host_memory buf(3 * page);
  // One block, then 8 blocks across two pages from an offset (PRP1 + PRP2).
  EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::read, 0, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), 0, 512), 0u);
  std::memset(buf.get(), 0xEE, buf.size());
  EXPECT_STATUS(
      status_of(drv_->run(io_, rw(nvme::opcode::read, 100, 8, buf.addr(2048), buf.addr(page)))),
      nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get() + 2048, 100 * 512, 4096), 0u);
  EXPECT_EQ(static_cast<unsigned>(buf.get()[2047]), 0xEEu);         // nothing before the buffer
  EXPECT_EQ(static_cast<unsigned>(buf.get()[2048 + 4096]), 0xEEu);  // nor after it
  // The last block of the namespace.
  EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::read, file_blocks - 1, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), file_bytes - 512, 512), 0u);
  // WRITE 8 blocks of another pattern, FLUSH, and the file holds them.
  tools::fill_buffer(buf.get(), 0, 4096, 77);
  EXPECT_STATUS(
      status_of(drv_->run(io_, rw(nvme::opcode::write, 40, 8, buf.addr(), buf.addr(page)))),
      nvme::status::ok());
  EXPECT_STATUS(status_of(drv_->run(io_, nvme::make_flush(0, 1))), nvme::status::ok());
  auto flush_all = nvme::make_flush(0, 0xFFFFFFFFu);
  EXPECT_STATUS(status_of(drv_->run(io_, flush_all)), nvme::status::ok());
  const auto got = file_bytes_at(40 * 512, 4096);
  EXPECT_EQ(tools::count_mismatches(got.data(), 0, 4096, 77), 0u);
  EXPECT_EQ(std::memcmp(got.data(), buf.get(), 4096), 0);
  // Neighbours untouched.
  EXPECT_EQ(tools::count_mismatches(file_bytes_at(39 * 512, 512).data(), 39 * 512, 512), 0u);
  EXPECT_EQ(tools::count_mismatches(file_bytes_at(48 * 512, 512).data(), 48 * 512, 512), 0u);
  // Read back through the device.
  std::memset(buf.get(), 0, buf.size());
  EXPECT_STATUS(
      status_of(drv_->run(io_, rw(nvme::opcode::read, 40, 8, buf.addr(), buf.addr(page)))),
      nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), 0, 4096, 77), 0u);
}

// 16 KiB through PRP lists: a read from an offset PRP1 (list of four), and a
// write whose list chains to a second list page.
TEST_F(NvmeModel, PrpLists) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  constexpr std::uint32_t bytes = 16384;
  host_memory data(bytes + 2 * page);
  host_memory lists(2 * page);
  auto* l = reinterpret_cast<std::uint64_t*>(lists.get());
  std::memset(data.get(), 0xEE, data.size());
  // PRP1 at 512 into page 0: 3584 bytes there, then pages 1..3, then 512 bytes of page 4.
  for (int i = 0; i < 4; ++i) l[i] = data.addr(std::size_t(i + 1) * page);
  EXPECT_STATUS(
      status_of(drv_->run(io_, rw(nvme::opcode::read, 200, 32, data.addr(512), lists.addr()))),
      nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(data.get() + 512, 200 * 512, bytes), 0u);
  EXPECT_EQ(static_cast<unsigned>(data.get()[511]), 0xEEu);
  EXPECT_EQ(static_cast<unsigned>(data.get()[512 + bytes]), 0xEEu);

  // The list starts 16 bytes before the end of its page: entry 0 is data,
  // entry 1 chains to the second list page with the last two data pages.
  tools::fill_buffer(data.get(), 0, 4 * page, 5);
  const std::size_t at = page - 16;
  std::uint64_t e0 = data.addr(page), chain = lists.addr(page);
  std::memcpy(lists.get() + at, &e0, 8);
  std::memcpy(lists.get() + at + 8, &chain, 8);
  l[512] = data.addr(2 * page);
  l[513] = data.addr(3 * page);
  EXPECT_STATUS(
      status_of(drv_->run(io_, rw(nvme::opcode::write, 1000, 32, data.addr(), lists.addr(at)))),
      nvme::status::ok());
  const auto got = file_bytes_at(1000 * 512, bytes);
  EXPECT_EQ(tools::count_mismatches(got.data(), 0, bytes, 5), 0u);
}

// 100 000 READs through a 4-entry queue: 25 000 passes of the ring, a phase
// flip each, in order, each buffer holding its block.
TEST_F(NvmeModel, WraparoundAndPhase) {
  bring_up(4);
  ASSERT_FALSE(HasFatalFailure());
  constexpr std::uint32_t commands = 100000;
  // SQ slots free as the device fetches, before their completions come, so
  // more commands than the SQ holds can be in flight: each has one of
  // `ring` buffers, by its number.
  constexpr std::uint32_t ring = 16;
  host_memory bufs(ring * page);
  std::vector<std::uint64_t> lba_of(ring);
  std::vector<std::uint16_t> cid_of(ring);
  std::uint32_t submitted = 0, completed = 0;
  std::uint64_t bad_data = 0;
  while (completed < commands) {
    while (submitted < commands && submitted - completed < ring && !drv_->sq_full(io_)) {
      const std::uint32_t k = submitted % ring;
      const std::uint64_t lba = (std::uint64_t{submitted} * 7919) % file_blocks;
      std::memset(bufs.get() + std::size_t{k} * page, 0xEE, 512);
      lba_of[k] = lba;
      cid_of[k] =
          drv_->submit(io_, rw(nvme::opcode::read, lba, 1, bufs.addr(std::size_t{k} * page)));
      ++submitted;
    }
    const std::uint32_t k = completed % ring;
    const std::uint32_t head_before = io_.sq_head;
    const auto e = drv_->next(io_);
    ASSERT_TRUE(e.has_value()) << "completion " << completed << " missing";
    ASSERT_EQ(e->cid, cid_of[k]) << "completion " << completed;
    ASSERT_EQ(e->sq_id, 1u);
    ASSERT_TRUE(status_of(*e).success()) << text(status_of(*e));
    // The SQ head moves forward, never past the tail.
    ASSERT_LE((e->sq_head + 4 - head_before) % 4, (io_.tail + 4 - head_before) % 4)
        << "SQ head " << e->sq_head << " at completion " << completed;
    bad_data += tools::count_mismatches(bufs.get() + std::size_t{k} * page, lba_of[k] * 512, 512);
    ++completed;
  }
  EXPECT_EQ(bad_data, 0u);
  EXPECT_EQ(io_.phase_flips, commands / 4);
  const auto s = dev_->counters();
  EXPECT_EQ(s.invalid_doorbells, 0u);
  EXPECT_GE(s.completions, commands);
}

// A CQ of 4 holds 3 completions; the rest wait until the driver frees entries.
TEST_F(NvmeModel, FullCompletionQueueStallsPosting) {
  bring_up(8, 4);
  ASSERT_FALSE(HasFatalFailure());
  host_memory buf(page);
  for (int i = 0; i < 6; ++i) drv_->submit(io_, rw(nvme::opcode::read, i, 1, buf.addr()));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(drv_->next(io_, 5s, false).has_value()) << i;
  // Entry 3 would make the ring full (tail + 1 == head): it never comes.
  EXPECT_FALSE(drv_->next(io_, 30ms, false).has_value());
  drv_->ring_cq(io_);  // head 3: three entries free
  for (int i = 3; i < 6; ++i) {
    const auto e = drv_->next(io_);
    ASSERT_TRUE(e.has_value()) << i;
    EXPECT_EQ(e->cid, i);
  }
  EXPECT_EQ(io_.phase_flips, 1u);
}

TEST_F(NvmeModel, InvalidCommandsGetTheirStatus) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  host_memory buf(4 * page);
  host_memory qmem(page);
  const auto admin = [&](const nvme::command& c) { return status_of(drv_->admin(c)); };
  const auto io = [&](const nvme::command& c) { return status_of(drv_->run(io_, c)); };
  using ao = nvme::admin_opcode;

  // Opcodes: an I/O opcode the admin queue lacks, an admin one on an I/O queue.
  nvme::command bad{};
  bad.opc = 0x7F;
  EXPECT_STATUS(admin(bad), generic(nvme::sc::invalid_opcode));
  bad.nsid = 1;
  EXPECT_STATUS(io(bad), generic(nvme::sc::invalid_opcode));
  // Fields: unsupported CNS and feature, 0xFFFF queues, SGLs.
  EXPECT_STATUS(admin(driver::identify(0x55, 0, buf.addr())), generic(nvme::sc::invalid_field));
  EXPECT_STATUS(admin(driver::identify(0, 2, buf.addr())), generic(nvme::sc::invalid_namespace));
  nvme::command feat = driver::set_queues(1, 1);
  feat.cdw10 = 0x0B;
  EXPECT_STATUS(admin(feat), generic(nvme::sc::invalid_field));
  // Set Features queues after I/O queues exist.
  EXPECT_STATUS(admin(driver::set_queues(2, 2)), generic(nvme::sc::command_sequence_error));
  auto sgl = rw(nvme::opcode::read, 0, 1, buf.addr());
  sgl.flags = 0x40;
  EXPECT_STATUS(io(sgl), generic(nvme::sc::invalid_field));

  // Queue creation and deletion.
  EXPECT_STATUS(admin(driver::create_cq(0, 8, qmem.addr())),
                specific(nvme::sc::invalid_queue_identifier));
  EXPECT_STATUS(admin(driver::create_cq(1, 8, qmem.addr())),  // exists
                specific(nvme::sc::invalid_queue_identifier));
  EXPECT_STATUS(admin(driver::create_cq(5, 8, qmem.addr())),  // beyond the 4 granted
                specific(nvme::sc::invalid_queue_identifier));
  EXPECT_STATUS(admin(driver::create_cq(2, 1, qmem.addr())),
                specific(nvme::sc::invalid_queue_size));
  EXPECT_STATUS(admin(driver::create_cq(2, drv_->mqes() + 1, qmem.addr())),
                specific(nvme::sc::invalid_queue_size));
  EXPECT_STATUS(admin(driver::create_cq(2, 8, qmem.addr(64))),
                generic(nvme::sc::prp_offset_invalid));
  auto noncontig = driver::create_cq(2, 8, qmem.addr());
  noncontig.cdw11 = 0;
  EXPECT_STATUS(admin(noncontig), generic(nvme::sc::invalid_field));
  EXPECT_STATUS(admin(driver::create_sq(2, 8, qmem.addr(), 3)),  // CQ 3 does not exist
                specific(nvme::sc::completion_queue_invalid));
  EXPECT_STATUS(admin(driver::create_sq(2, 8, qmem.addr(), 0)),  // nor is the admin CQ one
                specific(nvme::sc::completion_queue_invalid));
  EXPECT_STATUS(admin(driver::create_sq(1, 8, qmem.addr(), 1)),
                specific(nvme::sc::invalid_queue_identifier));
  EXPECT_STATUS(admin(driver::delete_queue(ao::delete_io_sq, 3)),
                specific(nvme::sc::invalid_queue_identifier));
  EXPECT_STATUS(admin(driver::delete_queue(ao::delete_io_sq, 0)),
                specific(nvme::sc::invalid_queue_identifier));
  EXPECT_STATUS(admin(driver::delete_queue(ao::delete_io_cq, 1)),  // SQ 1 still on it
                specific(nvme::sc::invalid_queue_deletion));

  // Namespaces and LBA ranges.
  EXPECT_STATUS(io(nvme::make_rw(nvme::opcode::read, 0, 2, 0, 1, buf.addr())),
                generic(nvme::sc::invalid_namespace));
  EXPECT_STATUS(io(nvme::make_flush(0, 7)), generic(nvme::sc::invalid_namespace));
  EXPECT_STATUS(io(rw(nvme::opcode::read, file_blocks - 1, 2, buf.addr(), buf.addr(page))),
                generic(nvme::sc::lba_out_of_range));
  EXPECT_STATUS(io(rw(nvme::opcode::write, file_blocks, 1, buf.addr())),
                generic(nvme::sc::lba_out_of_range));
  EXPECT_STATUS(io(rw(nvme::opcode::read, std::uint64_t{1} << 40, 1, buf.addr())),
                generic(nvme::sc::lba_out_of_range));
  // Beyond MDTS (2^5 pages = 128 KiB).
  EXPECT_STATUS(io(rw(nvme::opcode::read, 0, 257, buf.addr(), buf.addr(page))),
                generic(nvme::sc::invalid_field));

  // PRPs: PRP1 not dword aligned, PRP2 not page aligned, a list entry with an offset.
  std::memset(buf.get(), 0xEE, buf.size());
  EXPECT_STATUS(io(rw(nvme::opcode::read, 0, 1, buf.addr(2))),
                generic(nvme::sc::prp_offset_invalid));
  EXPECT_STATUS(io(rw(nvme::opcode::read, 0, 8, buf.addr(512), buf.addr(page + 8))),
                generic(nvme::sc::prp_offset_invalid));
  host_memory list(page);
  auto* l = reinterpret_cast<std::uint64_t*>(list.get());
  l[0] = buf.addr(page);
  l[1] = buf.addr(2 * page + 512);
  EXPECT_STATUS(io(rw(nvme::opcode::read, 0, 24, buf.addr(), list.addr())),
                generic(nvme::sc::prp_offset_invalid));
  // None of the refused READs wrote a byte.
  for (std::size_t i = 0; i < buf.size(); ++i)
    ASSERT_EQ(static_cast<unsigned>(buf.get()[i]), 0xEEu) << "byte " << i;
  // And no refused WRITE touched the file.
  EXPECT_EQ(tools::count_mismatches(file_bytes_at(0, file_bytes).data(), 0, file_bytes), 0u);

  // Deleting in order works, and the queue is gone afterwards.
  EXPECT_STATUS(admin(driver::delete_queue(ao::delete_io_sq, 1)), nvme::status::ok());
  EXPECT_STATUS(admin(driver::delete_queue(ao::delete_io_cq, 1)), nvme::status::ok());
  EXPECT_STATUS(admin(driver::delete_queue(ao::delete_io_cq, 1)),
                specific(nvme::sc::invalid_queue_identifier));
}

TEST_F(NvmeModel, DoorbellBeyondTheQueueIsIgnored) {
  bring_up(8);
  ASSERT_FALSE(HasFatalFailure());
  nm::write32(dev_->bar(), nm::sq_tail_doorbell(1, 0), 9);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dev_->counters().invalid_doorbells, 1u);
  const std::uint64_t before = dev_->counters().commands;
  nm::write32(dev_->bar(), nm::sq_tail_doorbell(1, 0), 0);  // back to the truth
  host_memory buf(page);
  EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::read, 1, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(dev_->counters().commands, before + 1);
}

TEST_F(NvmeModel, InjectedErrorStatus) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  host_memory buf(page);
  nm::faults f;
  f.fail_next = 2;
  f.fail_status = nvme::status::make(nvme::status_type::media, nvme::sc::unrecovered_read);
  dev_->inject(f);
  for (int i = 0; i < 2; ++i) {
    std::memset(buf.get(), 0xEE, 512);
    EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::read, 5, 1, buf.addr()))),
                  f.fail_status);
    EXPECT_EQ(static_cast<unsigned>(buf.get()[0]), 0xEEu);  // untouched
  }
  EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::read, 5, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), 5 * 512, 512), 0u);
  EXPECT_EQ(dev_->pending_faults().fail_next, 0u);
  // The admin queue is never failed.
  f.fail_next = 1;
  dev_->inject(f);
  host_memory id(page);
  EXPECT_STATUS(status_of(drv_->admin(driver::identify(1, 0, id.addr()))), nvme::status::ok());
  // Namespace not ready: retryable (DNR clear).
  nm::faults nr;
  nr.namespace_not_ready = true;
  dev_->inject(nr);
  const auto st = status_of(drv_->run(io_, rw(nvme::opcode::read, 5, 1, buf.addr())));
  EXPECT_STATUS(st, generic(nvme::sc::namespace_not_ready, false));
  EXPECT_EQ(st.raw & (1u << 14), 0u);
}

TEST_F(NvmeModel, DroppedDelayedAndReorderedCompletions) {
  bring_up(16);
  ASSERT_FALSE(HasFatalFailure());
  host_memory buf(page);
  const auto read = [&](std::uint64_t lba) {
    return drv_->submit(io_, rw(nvme::opcode::read, lba, 1, buf.addr()));
  };
  // Drop: the first command never completes, the second does.
  nm::faults f;
  f.drop_next = 1;
  dev_->inject(f);
  read(1);
  const std::uint16_t second = read(2);
  auto e = drv_->next(io_);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cid, second);
  EXPECT_FALSE(drv_->next(io_, 30ms).has_value());
  EXPECT_EQ(dev_->counters().dropped, 1u);

  // Delay: nothing for 40 ms, then the completion.
  f = {};
  f.delay = 40ms;
  dev_->inject(f);
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint16_t delayed = read(3);
  EXPECT_FALSE(drv_->next(io_, 20ms).has_value());
  e = drv_->next(io_);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cid, delayed);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 40ms);

  // Reorder: groups of three come back reversed; a lone one after 1 ms.
  f = {};
  f.reorder_window = 3;
  dev_->inject(f);
  std::vector<std::uint16_t> cids;
  // One doorbell for all four, so the device sees them together.
  for (int i = 0; i < 4; ++i)
    cids.push_back(drv_->submit(io_, rw(nvme::opcode::read, 10 + i, 1, buf.addr()), false));
  drv_->ring_sq(io_);
  std::vector<std::uint16_t> got;
  for (int i = 0; i < 4; ++i) {
    e = drv_->next(io_);
    ASSERT_TRUE(e.has_value()) << i;
    EXPECT_TRUE(status_of(*e).success());
    got.push_back(e->cid);
  }
  EXPECT_EQ(got, (std::vector<std::uint16_t>{cids[2], cids[1], cids[0], cids[3]}));
}

// CSTS.CFS: the device stops; a reset clears it and the device works again.
TEST_F(NvmeModel, FatalStatusAndRecoveryByReset) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  nm::faults f;
  f.fatal = true;
  dev_->inject(f);
  ASSERT_TRUE(drv_->wait_csts(nm::csts::cfs, nm::csts::cfs)) << "CSTS " << drv_->csts();
  host_memory buf(page);
  drv_->submit(io_, rw(nvme::opcode::read, 1, 1, buf.addr()));
  EXPECT_FALSE(drv_->next(io_, 30ms).has_value());
  // Reset: RDY and CFS clear, the queues are gone; bring-up again works.
  drv_->set_cc(0);
  ASSERT_TRUE(drv_->wait_csts(nm::csts::rdy | nm::csts::cfs, 0)) << "CSTS " << drv_->csts();
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::read, 7, 1, buf.addr()))),
                nvme::status::ok());
  EXPECT_EQ(tools::count_mismatches(buf.get(), 7 * 512, 512), 0u);
  EXPECT_EQ(dev_->counters().resets, 1u);  // bring_up's CC.EN = 0 found it disabled already
}

// Admin queues the model cannot run (unaligned ASQ) are a fatal status, not a hang.
TEST_F(NvmeModel, BadAdminQueueIsFatal) {
  host_memory q(2 * page);
  nm::write32(dev_->bar(), nm::reg::aqa, 7 | (7 << 16));
  nm::write64(dev_->bar(), nm::reg::asq, q.addr(64));
  nm::write64(dev_->bar(), nm::reg::acq, q.addr(page));
  drv_->set_cc(driver::cc_enabled);
  ASSERT_TRUE(drv_->wait_csts(nm::csts::cfs, nm::csts::cfs));
  EXPECT_EQ(drv_->csts() & nm::csts::rdy, 0u);
  drv_->set_cc(0);
  ASSERT_TRUE(drv_->wait_csts(nm::csts::cfs, 0));
}

TEST_F(NvmeModel, ShutdownCompletesAndIsDurable) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  host_memory buf(page);
  tools::fill_buffer(buf.get(), 0, 512, 9);
  EXPECT_STATUS(status_of(drv_->run(io_, rw(nvme::opcode::write, 300, 1, buf.addr()))),
                nvme::status::ok());
  drv_->set_cc(drv_->cc() | (1u << nm::cc::shn_shift));  // normal shutdown
  ASSERT_TRUE(drv_->wait_csts(nm::csts::shst_mask, nm::csts::shst_complete))
      << "CSTS " << drv_->csts();
  EXPECT_EQ(tools::count_mismatches(file_bytes_at(300 * 512, 512).data(), 0, 512, 9), 0u);
  // A shut-down controller takes no commands.
  drv_->submit(io_, rw(nvme::opcode::read, 1, 1, buf.addr()));
  EXPECT_FALSE(drv_->next(io_, 20ms).has_value());
  // Reset clears SHST.
  drv_->set_cc(0);
  ASSERT_TRUE(drv_->wait_csts(nm::csts::rdy | nm::csts::shst_mask, 0));
}

TEST_F(NvmeModel, IdleDeviceNaps) {
  bring_up();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_LT(test::idle_cpu_share(200ms), 0.5);
}

TEST(NvmeModelConfig, RefusesWhatItCannotModel) {
  nm::config cfg;
  cfg.path = "/nonexistent/warpstore-nvme-model";
  EXPECT_THROW(nm::device{cfg}, file_error);
  test::pattern_file f(4096);
  cfg.path = f.path();
  cfg.max_queue_entries = 1;
  EXPECT_THROW(nm::device{cfg}, invalid_argument);
  cfg.max_queue_entries = 64;
  cfg.dstrd = 16;
  EXPECT_THROW(nm::device{cfg}, invalid_argument);
}

}  // namespace
}  // namespace warpstore
