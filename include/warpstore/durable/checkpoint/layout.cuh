// Checkpoint files: the layout of slots and commit records, the checksums,
// and the types the device view and the host group share (outcomes,
// phases, faults, per-group control words). Part of durable/checkpoint.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "warpstore/array.cuh"
#include "warpstore/detail/hash.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/nvme.h"

namespace warpstore {

namespace ckpt {

inline constexpr std::uint64_t record_stride = 4096;      // one record per 4 KiB
inline constexpr std::uint64_t data_at = 65536;           // slot 0 starts here
inline constexpr std::uint64_t extent_align = 4096;       // each buffer padded to this
inline constexpr std::uint64_t slot_align = 65536;        // slot size rounded up to this
inline constexpr std::uint32_t record_sizes = 54;         // buffer sizes a record lists
inline constexpr std::uint32_t version = 1;
inline constexpr std::uint64_t magic = 0x313054504B435357ull;  // "WSCKPT01" little-endian

// One word's share of a data checksum: word `w` at word position `i`.
WARPSTORE_HD inline std::uint64_t mix(std::uint64_t w, std::uint64_t i) {
  return detail::mix64(w ^ (i * detail::golden_gamma + 0x632BE59BD9B4E019ull));
}

// The data checksum of `bytes` (a multiple of 8) at `p`, whose first word is
// word `first_word` of the slot. Host code (tests, tools) and the CPU target.
inline std::uint64_t checksum(const void* p, std::uint64_t bytes, std::uint64_t first_word) {
  const auto* w = static_cast<const std::uint64_t*>(p);
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < bytes / 8; ++k) sum += mix(w[k], first_word + k);
  return sum;
}

inline constexpr std::uint64_t align_up(std::uint64_t x, std::uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace ckpt

// A commit record, the first 512 bytes of its 4 KiB (one NVMe block: written
// atomically by the device, and checked by record_checksum anyway).
struct checkpoint_record {
  std::uint64_t magic;           // ckpt::magic
  std::uint32_t version;
  std::uint32_t slot;            // 0 or 1: must name the record's own place
  std::uint64_t sequence;        // 1, 2, ...: the newest valid record wins
  std::uint64_t data_offset;     // file byte offset of the slot
  std::uint64_t data_bytes;      // bytes of the slot the data checksum covers
  std::uint64_t data_checksum;   // sum of ckpt::mix over the slot's words
  std::uint64_t layout_hash;     // of the buffer count and sizes
  std::uint32_t buffers;
  std::uint32_t chunk_bytes;     // what wrote it (any chunk size restores it)
  std::uint64_t sizes[ckpt::record_sizes];  // the first buffers' sizes (diagnostics)
  std::uint64_t written_ns;      // the writer's clock (diagnostics)
  std::uint64_t record_checksum;  // over every byte before it

  WARPSTORE_HD std::uint64_t compute_checksum() const {
    const auto* w = reinterpret_cast<const std::uint64_t*>(this);
    std::uint64_t sum = 0x5CC1D5EEDull;
    for (std::uint32_t k = 0; k < sizeof(*this) / 8 - 1; ++k) sum += ckpt::mix(w[k], k + 0x10000);
    return detail::mix64(sum);
  }
  WARPSTORE_HD bool magic_ok() const { return magic == ckpt::magic && version == ckpt::version; }
};
static_assert(sizeof(checkpoint_record) == 512, "a commit record is one NVMe block");

// What a record place holds.
enum class record_state : std::uint32_t {
  empty = 0,    // all zero: never written
  invalid = 1,  // torn, corrupt, or not a record of this format
  valid = 2,    // checksum and fields verify
};

// How a checkpoint or restore operation ended.
enum class checkpoint_outcome : std::uint32_t {
  none = 0,             // no operation finished yet
  committed = 1,        // checkpoint: the record is durable
  restored = 2,         // restore: the buffers hold the checkpoint, data checksum verified
  empty = 3,            // restore: no valid record ("no checkpoint yet"); nothing touched
  data_mismatch = 4,    // restore: the newest record's data failed its checksum (excluded next time)
  layout_mismatch = 5,  // restore: the newest record describes other buffers; nothing touched
  failed = 6,           // a command failed or a wait expired: see the fault
  scanned = 7,          // the records were read (open)
};

// Where an operation failed.
enum class checkpoint_phase : std::uint32_t {
  none = 0,
  data_write,      // writing a chunk of a slot
  data_read,       // reading a chunk of a slot
  flush_data,      // the FLUSH before the record
  record_write,
  flush_record,    // the FLUSH after the record
  record_read,
  scratch_wait,    // no staging buffer came free before the deadline
  select_wait,     // restore: the warp reading the records did not finish in time
  array_read,      // reading a warpstore array through its cache (see the array's check())
  array_write,     // writing a warpstore array through its cache (see the array's check())
};
const char* to_string(checkpoint_phase p);
const char* to_string(checkpoint_outcome o);

// The first failure of an operation (first one wins; count counts them all).
struct checkpoint_fault {
  std::uint32_t state;  // 0 empty, 1 being written, 2 complete
  checkpoint_phase phase;
  std::uint32_t buffer;  // index of the buffer, or ~0u
  std::uint16_t status;  // nvme::status::raw
  std::uint16_t reserved;
  std::uint64_t offset;  // byte offset within the buffer
  std::uint64_t lba;     // first block of the failed command
  std::uint64_t count;

  WARPSTORE_HD void record(checkpoint_phase p, std::uint32_t b, nvme::status st, std::uint64_t off,
                           std::uint64_t block) {
    if (!detail::claim_record(state, count)) return;
    phase = p;
    buffer = b;
    status = st.raw;
    offset = off;
    lba = block;
    detail::publish_record(state);
  }
};

// Per-group state in device memory. The coordination words are reset by the
// warp that finishes each operation; the rest is written by that warp (or by
// the host between operations) and read by every warp of the next one.
struct checkpoint_control {
  // One operation's coordination.
  std::uint32_t arrivals;      // warps done with their share
  std::uint32_t select_state;  // restore: 0 idle, 1 reading records, 2 chosen, 3 failed, 4 nothing
  std::uint32_t failed;        // some warp's share failed
  std::uint32_t reserved0;
  std::uint64_t checksum;      // sum of the warps' data checksums
  // Between operations.
  std::uint64_t next_sequence;  // of the next checkpoint
  std::uint64_t exclude_from;   // restore skips records with a sequence >= this
  std::uint32_t next_slot;      // the inactive slot
  std::uint32_t restore_slot;   // restore: the chosen record
  std::uint64_t restore_sequence;
  std::uint64_t restore_checksum;
  // The records as last read (scan or restore).
  record_state states[2];
  std::uint64_t sequences[2];
  std::uint64_t layouts[2];
  std::uint32_t buffer_counts[2];
  // What the last operation did.
  checkpoint_outcome outcome;
  std::uint32_t reserved1;
  std::uint64_t outcome_sequence;
  std::uint64_t found_checksum;  // data_mismatch: what the data summed to
  std::uint64_t operations;      // operations finished
  checkpoint_fault fault;
};

enum class checkpoint_buffer_kind : std::uint32_t { device, array };

// One registered buffer as kernels see it.
struct checkpoint_buffer {
  checkpoint_buffer_kind kind;
  std::uint32_t reserved;
  std::byte* device;              // kind device: 16-byte aligned
  array_ref<std::byte> array;     // kind array: a byte view of the array
  std::uint64_t bytes;
  std::uint64_t slot_offset;      // where it starts within a slot
  std::uint64_t extent;           // bytes rounded up to ckpt::extent_align
  std::uint64_t first_chunk;      // chunks of all buffers before it
};

}  // namespace warpstore
