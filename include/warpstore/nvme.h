// NVMe submission and completion entries, laid out as the NVMe Base
// Specification (2.0, section 4) defines them. This is the only on-wire
// format between the GPU queues and any controller.
#pragma once

#include <cstddef>
#include <cstdint>

#include "warpstore/detail/platform.cuh"

namespace warpstore::nvme {

// Logical block size every warpstore namespace exposes. Controllers over
// devices with 4 KiB sectors still address in 512-byte units.
inline constexpr std::uint32_t block_size = 512;
inline constexpr std::uint32_t block_shift = 9;
// The memory page size of PRPs (CC.MPS = 0): 4 KiB.
inline constexpr std::uint64_t memory_page = 4096;

// NVM command set opcodes (NVM Command Set Specification, figure 18).
enum class opcode : std::uint8_t { flush = 0x00, write = 0x01, read = 0x02 };

// Admin command set opcodes (Base Specification 1.4, figure 139): the ones a
// driver needs to bring a controller up and create its I/O queues.
enum class admin_opcode : std::uint8_t {
  delete_io_sq = 0x00,
  create_io_sq = 0x01,
  delete_io_cq = 0x04,
  create_io_cq = 0x05,
  identify = 0x06,
  set_features = 0x09,
};

// Status code types (Base Specification, figure 100).
enum class status_type : std::uint8_t {
  generic = 0x0,
  command_specific = 0x1,
  media = 0x2,
  path = 0x3,
  vendor = 0x7,
};

// Generic command status values (figure 101) plus the media errors and the
// vendor-specific codes warpstore uses.
namespace sc {
inline constexpr std::uint8_t success = 0x00;
inline constexpr std::uint8_t invalid_opcode = 0x01;
inline constexpr std::uint8_t invalid_field = 0x02;
inline constexpr std::uint8_t data_transfer_error = 0x04;
inline constexpr std::uint8_t internal_error = 0x06;
inline constexpr std::uint8_t abort_requested = 0x07;
inline constexpr std::uint8_t invalid_namespace = 0x0B;
inline constexpr std::uint8_t command_sequence_error = 0x0C;
inline constexpr std::uint8_t prp_offset_invalid = 0x13;
inline constexpr std::uint8_t namespace_write_protected = 0x20;  // a WRITE to a read-only open
inline constexpr std::uint8_t lba_out_of_range = 0x80;  // generic type
inline constexpr std::uint8_t namespace_not_ready = 0x82;  // generic type
// Command specific (type 1) of the queue management commands (figure 145-153).
inline constexpr std::uint8_t completion_queue_invalid = 0x00;
inline constexpr std::uint8_t invalid_queue_identifier = 0x01;
inline constexpr std::uint8_t invalid_queue_size = 0x02;
inline constexpr std::uint8_t invalid_queue_deletion = 0x0C;
inline constexpr std::uint8_t write_fault = 0x80;       // media type
inline constexpr std::uint8_t unrecovered_read = 0x81;  // media type
// Vendor specific (type 7): raised by the GPU side, never by a controller.
inline constexpr std::uint8_t deadline_exceeded = 0xC0;
inline constexpr std::uint8_t index_out_of_range = 0xC1;
inline constexpr std::uint8_t no_victim = 0xC2;
inline constexpr std::uint8_t starved = 0xC3;
}  // namespace sc

// A decoded 15-bit status field (completion dword 3 bits 31:17), kept
// without the phase tag.
struct status {
  std::uint16_t raw = 0;  // bits 7:0 SC, 10:8 SCT, 14 DNR (phase removed)

  WARPSTORE_HD static constexpr status make(status_type t, std::uint8_t code, bool dnr = true) {
    return status{static_cast<std::uint16_t>(code | (static_cast<unsigned>(t) << 8) |
                                             (dnr ? (1u << 14) : 0u))};
  }
  WARPSTORE_HD static constexpr status ok() { return status{}; }
  WARPSTORE_HD constexpr std::uint8_t code() const { return raw & 0xFF; }
  WARPSTORE_HD constexpr status_type type() const {
    return static_cast<status_type>((raw >> 8) & 0x7);
  }
  WARPSTORE_HD constexpr bool success() const { return (raw & 0x7FF) == 0; }

  // The status a bounded wait returns when it gives up.
  WARPSTORE_HD static constexpr status deadline() {
    return make(status_type::vendor, sc::deadline_exceeded);
  }
  // A wait that gave up because every way of its cache set stayed pinned:
  // more lines pinned at once than the cache holds.
  WARPSTORE_HD static constexpr status no_victim() {
    return make(status_type::vendor, sc::no_victim);
  }
  // A wait that gave up while its cache set kept changing (deadline::capped):
  // other accesses took every line freed there. The launch wants far more
  // lines of one set at once than the cache holds.
  WARPSTORE_HD static constexpr status starved() {
    return make(status_type::vendor, sc::starved);
  }
  WARPSTORE_HD constexpr bool is_deadline() const {
    return type() == status_type::vendor && code() == sc::deadline_exceeded;
  }
};

// Submission queue entry (figure 88 and the NVM command set's READ/WRITE).
struct command {
  std::uint8_t opc;    // CDW0 7:0  opcode
  std::uint8_t flags;  // CDW0 15:8 FUSE (1:0), PSDT (7:6); 0 = PRPs
  std::uint16_t cid;   // CDW0 31:16 command identifier
  std::uint32_t nsid;  // CDW1 namespace
  std::uint32_t cdw2;
  std::uint32_t cdw3;
  std::uint64_t mptr;  // CDW4-5 metadata pointer
  std::uint64_t prp1;  // CDW6-7 data pointer, PRP entry 1
  std::uint64_t prp2;  // CDW8-9 PRP entry 2 or PRP list
  std::uint32_t cdw10;  // READ/WRITE: starting LBA 31:0
  std::uint32_t cdw11;  // READ/WRITE: starting LBA 63:32
  std::uint32_t cdw12;  // READ/WRITE: 15:0 number of blocks, 0-based; 30 FUA
  std::uint32_t cdw13;
  std::uint32_t cdw14;
  std::uint32_t cdw15;

  WARPSTORE_HD std::uint64_t slba() const {
    return static_cast<std::uint64_t>(cdw10) | (static_cast<std::uint64_t>(cdw11) << 32);
  }
  // Number of logical blocks, 1-based.
  WARPSTORE_HD std::uint32_t nlb() const { return (cdw12 & 0xFFFFu) + 1; }
};

static_assert(sizeof(command) == 64, "NVMe SQE is 64 bytes");
static_assert(offsetof(command, cid) == 2, "CID is CDW0 bits 31:16");
static_assert(offsetof(command, nsid) == 4, "NSID is CDW1");
static_assert(offsetof(command, mptr) == 16, "MPTR is CDW4-5");
static_assert(offsetof(command, prp1) == 24, "PRP1 is CDW6-7");
static_assert(offsetof(command, prp2) == 32, "PRP2 is CDW8-9");
static_assert(offsetof(command, cdw10) == 40, "CDW10 at byte 40");
static_assert(offsetof(command, cdw15) == 60, "CDW15 at byte 60");

// Completion queue entry (figure 90).
struct completion {
  std::uint32_t dw0;      // command specific
  std::uint32_t dw1;      // reserved
  std::uint16_t sq_head;  // DW2 15:0  SQ head pointer
  std::uint16_t sq_id;    // DW2 31:16 SQ identifier
  std::uint16_t cid;      // DW3 15:0  command identifier
  std::uint16_t status;   // DW3 16 phase tag, 31:17 status field
};

static_assert(sizeof(completion) == 16, "NVMe CQE is 16 bytes");
static_assert(offsetof(completion, sq_head) == 8, "SQ head is DW2 15:0");
static_assert(offsetof(completion, cid) == 12, "CID is DW3 15:0");
static_assert(offsetof(completion, status) == 14, "status is DW3 31:16");

// Dword 3 of a CQE: the word a controller writes last and a waiter reads first.
WARPSTORE_HD constexpr std::uint32_t completion_dw3(std::uint16_t cid, status s, bool phase) {
  return static_cast<std::uint32_t>(cid) |
         (static_cast<std::uint32_t>((s.raw << 1) | (phase ? 1u : 0u)) << 16);
}
WARPSTORE_HD constexpr bool dw3_phase(std::uint32_t dw3) { return (dw3 >> 16) & 1u; }
WARPSTORE_HD constexpr std::uint16_t dw3_cid(std::uint32_t dw3) { return dw3 & 0xFFFFu; }
WARPSTORE_HD constexpr status dw3_status(std::uint32_t dw3) {
  return status{static_cast<std::uint16_t>((dw3 >> 17) & 0x7FFFu)};
}

// Points `c` at the contiguous buffer `data`. PRP2 follows the PRP rules for
// transfers of up to two pages; the host and memory controllers treat PRP1
// as one contiguous buffer of the whole length; for a controller that walks
// PRPs, a transfer over more than two pages takes PRP2 from a PRP list
// (queue_pair_ref::prp_lists).
WARPSTORE_HD inline void set_data(command& c, std::uint64_t data) {
  c.prp1 = data;
  c.prp2 = (data & ~(memory_page - 1)) + memory_page;
}

// Builds a READ or WRITE of `blocks` logical blocks at `slba` into `data`.
WARPSTORE_HD inline command make_rw(opcode op, std::uint16_t cid, std::uint32_t nsid,
                                    std::uint64_t slba, std::uint32_t blocks, std::uint64_t data) {
  command c{};
  c.opc = static_cast<std::uint8_t>(op);
  c.cid = cid;
  c.nsid = nsid;
  set_data(c, data);
  c.cdw10 = static_cast<std::uint32_t>(slba);
  c.cdw11 = static_cast<std::uint32_t>(slba >> 32);
  c.cdw12 = (blocks - 1) & 0xFFFFu;
  return c;
}

WARPSTORE_HD inline command make_flush(std::uint16_t cid, std::uint32_t nsid) {
  command c{};
  c.opc = static_cast<std::uint8_t>(opcode::flush);
  c.cid = cid;
  c.nsid = nsid;
  return c;
}

}  // namespace warpstore::nvme
