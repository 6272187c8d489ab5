// A software NVMe controller: the NVMe 1.4 register file (BAR0) in ordinary
// memory, and one CPU thread that acts as the device behind it. A driver
// brings it up exactly as it would a real controller (CC.EN, AQA/ASQ/ACQ,
// CSTS.RDY, admin commands) and then reads and writes a backing file through
// I/O queues it creates. Memory addresses in queues and PRPs are host virtual
// addresses of this process: the model's DMA is a memcpy (a pread/pwrite).
//
// It lives next to the controllers because the `nvme` controller
// (nvme_controller.h) drives it unchanged: `controller="nvme-model"` puts
// the model over a file and the GPU data path over the model, so every test
// of the read and write paths runs against a device that walks PRPs, checks
// LBAs and posts phase-tagged completions the way a real one does.
//
// What a real device enforces, it enforces, with the status the
// specification gives: invalid opcodes and fields, invalid queue identifiers
// and sizes, a CQ that does not exist, deleting a CQ that still has SQs,
// namespaces, LBA ranges, transfers beyond MDTS, PRP offsets (PRP1 dword
// aligned, PRP2 and list entries page aligned). A full CQ stalls posting;
// the device stops fetching from the SQs of a CQ whose completions it cannot
// post. Doorbell writes beyond a queue's size are ignored and counted (a real
// device would raise an asynchronous event, which the model lacks).
//
// Not modelled: interrupts (INTMS/INTMC are plain storage; drivers poll),
// asynchronous events, Get Features / Get Log Page / Abort, SGLs, metadata,
// more than one namespace, memory page sizes other than 4 KiB, non-contiguous
// queues (CAP.CQR is 1), several device threads, GPU memory as a PRP target
// (the model's DMA is the CPU's: PRPs must be host memory).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "controller/fault_policy.h"
#include "warpstore/nvme.h"

namespace warpstore::nvme_model {

// Register offsets in BAR0 (Base Specification 1.4, figure 78).
namespace reg {
inline constexpr std::uint32_t cap = 0x00;    // 64-bit, controller capabilities
inline constexpr std::uint32_t vs = 0x08;     // version
inline constexpr std::uint32_t intms = 0x0C;  // interrupt mask set
inline constexpr std::uint32_t intmc = 0x10;  // interrupt mask clear
inline constexpr std::uint32_t cc = 0x14;     // controller configuration
inline constexpr std::uint32_t csts = 0x1C;   // controller status
inline constexpr std::uint32_t aqa = 0x24;    // admin queue attributes
inline constexpr std::uint32_t asq = 0x28;    // 64-bit, admin SQ base
inline constexpr std::uint32_t acq = 0x30;    // 64-bit, admin CQ base
inline constexpr std::uint32_t doorbells = 0x1000;
}  // namespace reg

// Fields of CC and CSTS the model acts on.
namespace cc {
inline constexpr std::uint32_t en = 1u << 0;
inline constexpr std::uint32_t mps_shift = 7;   // 10:7, page size 2^(12+MPS)
inline constexpr std::uint32_t shn_shift = 14;  // 15:14 shutdown notification
inline constexpr std::uint32_t iosqes_shift = 16;
inline constexpr std::uint32_t iocqes_shift = 20;
}  // namespace cc
namespace csts {
inline constexpr std::uint32_t rdy = 1u << 0;
inline constexpr std::uint32_t cfs = 1u << 1;
inline constexpr std::uint32_t shst_shift = 2;  // 3:2
inline constexpr std::uint32_t shst_mask = 3u << shst_shift;
inline constexpr std::uint32_t shst_occurring = 1u << shst_shift;
inline constexpr std::uint32_t shst_complete = 2u << shst_shift;
}  // namespace csts

// Register access as a device and a driver both do it: 32- or 64-bit, never
// torn, acquire on reads and release on writes so that a doorbell orders the
// queue entries written before it.
std::uint32_t read32(const std::byte* bar, std::uint32_t offset);
std::uint64_t read64(const std::byte* bar, std::uint32_t offset);
void write32(std::byte* bar, std::uint32_t offset, std::uint32_t value);
void write64(std::byte* bar, std::uint32_t offset, std::uint64_t value);

// Doorbell offsets for stride 4 << CAP.DSTRD.
constexpr std::uint32_t sq_tail_doorbell(std::uint16_t qid, std::uint32_t dstrd) {
  return reg::doorbells + (2u * qid) * (4u << dstrd);
}
constexpr std::uint32_t cq_head_doorbell(std::uint16_t qid, std::uint32_t dstrd) {
  return reg::doorbells + (2u * qid + 1u) * (4u << dstrd);
}

struct config {
  std::string path;                        // backing file; its namespace: size / 512 blocks, rounded up
  bool read_only = false;                  // opened read-only; WRITEs get Namespace Is Write Protected
  std::uint32_t max_queue_entries = 1024;  // CAP.MQES + 1, 2..65536
  std::uint16_t max_io_queues = 16;        // most I/O SQs (and CQs) Set Features grants
  std::uint8_t dstrd = 0;                  // CAP.DSTRD: doorbell stride 4 << dstrd
  std::uint8_t timeout_500ms = 2;          // CAP.TO: the longest a driver waits for RDY
  std::uint8_t mdts = 5;                   // largest transfer 2^mdts pages (0: unlimited)
  // How long the device takes from CC.EN = 1 to CSTS.RDY = 1 (and back), so
  // drivers that do not wait for RDY fail their tests.
  std::chrono::microseconds ready_delay{2000};
  // What the medium keeps, for crash tests: the power-cut layer
  // (powercut.h), consulted as the host controller consults it. Every I/O
  // command it covers goes through before_execute (an io_error action fails
  // it with a media status: the power is off); each WRITE's pwrite sits
  // between write_starting and write_finished, each FLUSH's fdatasync
  // between flush_starting and flush_finished (false: the FLUSH fails).
  // Null: the file is the medium.
  std::shared_ptr<fault_policy> media;
};

// Misbehaviour on request (inject()). fail_next and drop_next count down as
// they act and fatal clears once CFS is set; delay, reorder_window and
// namespace_not_ready hold until replaced. Commands on the admin queue are
// never failed, dropped, delayed or reordered: the switches act on I/O
// queues, so a test can still bring the device up and tear its queues down.
//
// Not yet modelled: faults aimed at one queue, opcode or LBA range (the
// switches take the next I/O commands of any queue), a device that stops
// fetching without CFS, corrupted data or CQEs, duplicate completions, wrong
// SQ head pointers, surprise removal (registers reading all ones).
struct faults {
  std::uint32_t fail_next = 0;  // next commands complete with fail_status, untouched data
  nvme::status fail_status =
      nvme::status::make(nvme::status_type::media, nvme::sc::unrecovered_read);
  std::uint32_t drop_next = 0;         // next commands execute, but no CQE is ever posted
  std::chrono::microseconds delay{0};  // every completion waits this long before posting
  // Completions collect until this many are pending on one CQ (or the CQ saw
  // none for a millisecond) and are then posted in reverse order; 0 or 1: in order.
  std::uint32_t reorder_window = 0;
  bool fatal = false;                // set CSTS.CFS; the device stops until CC.EN goes 0
  bool namespace_not_ready = false;  // I/O commands get Namespace Not Ready (DNR clear)
};

struct stats {
  std::uint64_t commands = 0;           // fetched, admin and I/O
  std::uint64_t completions = 0;        // CQEs posted
  std::uint64_t dropped = 0;            // completions dropped on request
  std::uint64_t invalid_doorbells = 0;  // doorbell values beyond their queue
  std::uint64_t resets = 0;             // CC.EN 1 -> 0 transitions
};

class device {
 public:
  // Opens the backing file and starts the device thread, disabled (CSTS 0).
  // Raises warpstore::file_error if the file cannot be opened and
  // warpstore::invalid_argument for a configuration outside its ranges.
  explicit device(config cfg);
  // Stops the device thread; the driver must not touch the BAR afterwards.
  ~device();
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  // BAR0: what a driver maps. At least 16 KiB, 4 KiB aligned.
  std::byte* bar() { return bar_.get(); }
  std::size_t bar_bytes() const { return bar_bytes_; }
  // Namespace 1 in 512-byte blocks: the file's size, a partial last block
  // counted (it reads as zeros past the end; writes there stop at the end).
  std::uint64_t blocks() const { return blocks_; }
  std::uint64_t file_bytes() const { return file_bytes_; }

  // Replaces the misbehaviour switches (the device thread applies them from
  // its next command on), and reads what is left of them.
  void inject(const faults& f);
  faults pending_faults() const;
  stats counters() const;

  static constexpr std::uint32_t page_size = 4096;
  static constexpr std::uint16_t vendor_id = 0x1B36;  // the QEMU / Red Hat PCI vendor id
  static constexpr const char* serial = "WARPSTORE-MODEL-0001";
  static constexpr const char* model_name = "warpstore software NVMe model";

  struct state;  // the device thread's own (nvme_model.cpp)

 private:
  void run() noexcept;

  config cfg_;
  struct free_bar {
    void operator()(std::byte* p) const;
  };
  std::size_t bar_bytes_ = 0;
  std::unique_ptr<std::byte, free_bar> bar_;
  std::uint64_t blocks_ = 0;
  std::uint64_t file_bytes_ = 0;
  int fd_ = -1;
  mutable std::mutex faults_mutex_;
  faults faults_;
  mutable std::mutex stats_mutex_;
  stats stats_;
  std::unique_ptr<state> st_;  // the device thread's own state
  std::atomic<bool> stop_{false};
  std::thread thread_;  // declared last: started after everything it uses
};

}  // namespace warpstore::nvme_model
