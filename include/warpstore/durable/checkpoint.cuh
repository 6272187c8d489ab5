// Checkpoints of GPU state to a file (issue 4, part 3): device buffers and
// warpstore arrays registered in a group are written to storage together and
// committed atomically, so that a crash (kill -9) or a power cut at any
// instant leaves the last committed checkpoint intact and restorable.
//
//   warpstore::checkpoint_group g;
//   g.add(ranks, n * sizeof(double), "ranks").add(header, 64, "header");
//   g.open("/data/pagerank.ckpt", opts);        // sized, created if missing
//   if (g.restore().restored()) ...             // newest committed checkpoint, if any
//   g.checkpoint();                             // host form: returns when durable
//   kernel<<<...>>>(g.ref()); g.finish();       // device form: ref.checkpoint(warp, warps)
//
// All I/O goes through the controller's NVMe queues (io_ref::write / read /
// flush, one command at most one chunk = options::line_size bytes), on either
// target: the GPU, or the CPU target where std::threads play warps.
//
// File layout (byte offsets; every region a multiple of 4096 bytes, so the
// host controller may use O_DIRECT):
//
//   0        commit record of slot 0 (512 bytes: one NVMe block), zero to 4096
//   4096     commit record of slot 1
//   65536    slot 0: the buffers one after another, each padded with zeros to
//            a multiple of 4096 bytes (data_bytes in all)
//   65536 + S  slot 1, S = data_bytes rounded up to 64 KiB
//
// A commit record (checkpoint_record) carries a magic, its slot, a sequence
// number (1, 2, ...), the layout (buffer count and sizes, and their hash),
// data_bytes, a checksum of the slot's data_bytes bytes and a checksum of the
// record itself. The data checksum is the sum over every 8-byte word w at
// word position i of the slot of mix(w, i): order-free, so any number of
// warps compute it in parallel, the CPU target and the GPU alike, and any
// chunk size restores what any other wrote.
//
// Commit protocol (double buffering). The group knows the slot that does NOT
// hold the newest valid checkpoint (the inactive one) and the next sequence
// number (one more than any valid record's).
//   1. every warp writes its share of the chunks into the inactive slot and
//      adds the checksum of what it wrote to a device-scope accumulator;
//      each write has completed at the controller when the warp goes on;
//   2. each warp then arrives at a device-scope counter; the warp that
//      arrives last (no grid barrier, no cooperative launch: nobody waits for
//      anybody) issues FLUSH (everything written is durable), writes the
//      slot's commit record in one 512-byte block, and issues FLUSH again;
//   3. only then is the checkpoint committed: the next one goes to the other
//      slot.
// Every wait is bounded (options::timeout_ns); a failed or late command is
// recorded (checkpoint_fault) and the commit is not written.
//
// Restore reads both records and takes the newest one whose record checksum
// verifies, whose slot field is its own and whose layout is the group's; it
// reads that slot into the buffers, checking the data checksum, and falls back
// to the other record if the data does not verify (the host form does this by
// itself; the device form reports data_mismatch and the next restore skips
// that record). A file whose records are all zero or invalid is the "no
// checkpoint yet" state: restore() reports it (restore_result::empty) and
// touches no buffer.
//
// Why it is crash-safe. A checkpoint writes only the inactive slot and that
// slot's record; the active slot and its record are never written while they
// hold the newest valid checkpoint. So whatever a crash tears (any subset of
// the blocks written since the last FLUSH lost or kept, in any order), the
// newest committed checkpoint's record and data are untouched and still
// verify. A torn record fails its checksum (it is one block, which NVMe writes
// atomically, and the checksum catches anything else); a record that made it
// without its data (a device reordering writes across FLUSH, the memory
// controller writing its pinned pages back in any order, a lost block) fails
// the data checksum, and restore falls back to the other slot, the previous
// commit. A record is written only after FLUSH made its data durable, and
// checkpoint() returns only after the FLUSH that made the record durable, so
// an acknowledged checkpoint is never lost. Restore writes nothing to the
// file, so it is safe to interrupt and rerun.
//
// Rules for the device form: every warp numbered 0..warps-1 calls
// checkpoint(warp, warps) (or restore) exactly once per operation, with all 32
// lanes converged; the buffers must not change while a checkpoint reads them;
// one operation per group at a time: the next may start once every warp of
// the previous has returned (in a later kernel, say). The host learns the
// outcome with checkpoint_group::finish(). With the memory controller a
// device-side FLUSH only reaches pinned host memory: finish() (and the host
// forms) take the writes to the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "warpstore/array.cuh"
#include "warpstore/controller.h"
#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"
#include "warpstore/io.cuh"
#include "warpstore/nvme.h"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore {

namespace ckpt {

inline constexpr std::uint64_t record_stride = 4096;      // one record per 4 KiB
inline constexpr std::uint64_t data_at = 65536;           // slot 0 starts here
inline constexpr std::uint64_t extent_align = 4096;       // each buffer padded to this
inline constexpr std::uint64_t slot_align = 65536;        // slot size rounded up to this
inline constexpr std::uint32_t record_sizes = 54;         // buffer sizes a record lists
inline constexpr std::uint32_t version = 1;
inline constexpr std::uint64_t magic = 0x313054504B435357ull;  // "WSCKPT01" little-endian

// The finalizer of splitmix64: a bijection of 64-bit words.
WARPSTORE_HD inline std::uint64_t fmix(std::uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One word's share of a data checksum: word `w` at word position `i`.
WARPSTORE_HD inline std::uint64_t mix(std::uint64_t w, std::uint64_t i) {
  return fmix(w ^ (i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
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
    return ckpt::fmix(sum);
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

namespace detail {

// Sum over the calling warp (every lane gets it).
WARPSTORE_HD inline std::uint64_t warp_sum_u64(unsigned mask, std::uint64_t x) {
#if WARPSTORE_ON_GPU
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(mask, x, o);
#else
  (void)mask;
#endif
  return x;
}

WARPSTORE_HD inline std::uint64_t load_word(const std::byte* p) {
  return *reinterpret_cast<const std::uint64_t*>(p);
}

}  // namespace detail

// The device view of a group: trivially copyable, passed to kernels by value.
struct checkpoint_ref {
  io_ref io;
  const checkpoint_buffer* buffers;  // device memory
  std::uint32_t buffer_count;
  std::uint32_t chunk_bytes;         // at most one cache line (options::line_size)
  std::uint64_t total_chunks;
  std::uint64_t data_bytes;          // per slot: the buffers' extents
  std::uint64_t slot_offsets[2];
  std::uint64_t layout_hash;
  std::uint64_t timeout_ns;
  checkpoint_control* control;
  std::byte* record_io;              // 3 * ckpt::record_stride: two to read, one to write
  std::uint32_t record_bytes;        // bytes one record command moves (min(4096, chunk))
  std::uint32_t scratch_sets;
  std::byte* scratch;                // scratch_sets * warp::size * chunk_bytes
  std::uint32_t* scratch_locks;      // one per set
  std::uint64_t sizes[ckpt::record_sizes];

  // The whole warp of lane 0..31 on the GPU, the thread itself on the CPU.
  static constexpr unsigned warp_mask =
      detail::warp::size == 32 ? 0xFFFFFFFFu : (1u << detail::warp::size) - 1u;

  // Device form of a checkpoint: warp `warp` of `warps` writes its share of
  // the buffers into the inactive slot; the last to arrive commits. Returns
  // committed or failed to that warp, none to the others (their part is
  // done: the outcome reaches the host through checkpoint_group::finish()).
  WARPSTORE_HD checkpoint_outcome checkpoint(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned mask = warp_mask;
    const std::uint32_t slot = load(control->next_slot);
    const std::uint64_t base = slot_offsets[slot];
    std::uint64_t sum = 0;
    bool ok = true;
    for_chunks<true>(mask, warp, warps, base, sum, ok);
    if (!arrive(mask, warps, sum, ok)) return checkpoint_outcome::none;
    return commit(mask, slot);
  }

  // Device form of a restore: the first warp reads the two records and
  // picks the newest valid one; every warp reads its share of that slot
  // into the buffers. The last to arrive checks the data checksum and
  // returns the outcome (restored, data_mismatch, empty, layout_mismatch,
  // failed); the others get none.
  WARPSTORE_HD checkpoint_outcome restore(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned mask = warp_mask;
    const std::uint32_t chosen = select(mask);
    std::uint64_t sum = 0;
    bool ok = true;
    if (chosen == 2) {
      const std::uint64_t base = slot_offsets[load(control->restore_slot)];
      for_chunks<false>(mask, warp, warps, base, sum, ok);
    }
    if (!arrive(mask, warps, sum, ok)) return checkpoint_outcome::none;
    return finish_restore(mask, chosen);
  }

  // One warp (the host's open): reads the two records and sets the inactive
  // slot and the next sequence from them.
  WARPSTORE_HD checkpoint_outcome scan() const {
    const unsigned mask = warp_mask;
    const bool ok = read_records(mask);
    checkpoint_outcome out = checkpoint_outcome::failed;
    if (ok && detail::warp::lane() == 0) {
      classify_records();
      out = checkpoint_outcome::scanned;
      set_outcome(out, 0, 0);
    } else if (!ok && detail::warp::lane() == 0) {
      set_outcome(out, 0, 0);
    }
    detail::warp::sync(mask);
    return out;
  }

  // Where chunk c lives: its buffer, byte offset and length.
  WARPSTORE_HD std::uint32_t buffer_of(std::uint64_t c) const {
    std::uint32_t lo = 0, hi = buffer_count;  // the last buffer whose first_chunk <= c
    while (hi - lo > 1) {
      const std::uint32_t mid = (lo + hi) / 2;
      if (buffers[mid].first_chunk <= c) lo = mid;
      else hi = mid;
    }
    return lo;
  }

 private:
  template <class T>
  WARPSTORE_HD static T load(T& x) {
    return detail::device_atomic<T>(x).load(detail::memory_order_relaxed);
  }
  template <class T>
  WARPSTORE_HD static void store(T& x, T v) {
    detail::device_atomic<T>(x).store(v, detail::memory_order_relaxed);
  }

  WARPSTORE_HD void set_outcome(checkpoint_outcome o, std::uint64_t seq, std::uint64_t found) const {
    control->outcome = o;
    control->outcome_sequence = seq;
    control->found_checksum = found;
    detail::device_atomic<std::uint64_t>(control->operations).fetch_add(1, detail::memory_order_relaxed);
  }

  // A staging set (warp::size chunks) for this warp: the first lane tries
  // every set from a hint on; bounded by the deadline. Returns the set or
  // ~0u, the same on every lane.
  WARPSTORE_HD std::uint32_t acquire_scratch(unsigned mask, std::uint64_t hint) const {
    std::uint32_t got = ~0u;
    if (detail::warp::lane() == detail::warp::first_lane(mask)) {
      detail::deadline dl(timeout_ns);
      for (;;) {
        for (std::uint32_t k = 0; k < scratch_sets && got == ~0u; ++k) {
          const std::uint32_t s = static_cast<std::uint32_t>((hint + k) % scratch_sets);
          std::uint32_t expected = 0;
          if (load(scratch_locks[s]) == 0 &&
              detail::device_atomic<std::uint32_t>(scratch_locks[s])
                  .compare_exchange_strong(expected, 1, detail::memory_order_acquire,
                                           detail::memory_order_relaxed))
            got = s;
        }
        if (got != ~0u || dl.expired()) break;
        dl.pause();
      }
    }
    return detail::warp::shfl(mask, got, detail::warp::first_lane(mask));
  }
  WARPSTORE_HD void release_scratch(unsigned mask, std::uint32_t s) const {
    detail::warp::sync(mask);  // every lane is done with the set
    if (detail::warp::lane() == detail::warp::first_lane(mask))
      detail::device_atomic<std::uint32_t>(scratch_locks[s]).store(0, detail::memory_order_release);
  }
  WARPSTORE_HD std::byte* scratch_chunk(std::uint32_t set, unsigned lane) const {
    return scratch + (static_cast<std::uint64_t>(set) * detail::warp::size + lane) * chunk_bytes;
  }

  // Every chunk of this warp's share, warp::size at a time (one per lane):
  // Write: buffers -> slot at `base`; else slot -> buffers. Each lane adds
  // the checksum words it reads to `sum`; a failure is recorded and clears ok.
  template <bool Write>
  WARPSTORE_HD void for_chunks(unsigned mask, std::uint64_t warp, std::uint64_t warps,
                               std::uint64_t base, std::uint64_t& sum, bool& ok) const {
    const unsigned lanes = detail::warp::size;
    const unsigned lane = detail::warp::lane();
    for (std::uint64_t first = warp * lanes; first < total_chunks; first += warps * lanes) {
      const std::uint64_t c = first + lane;
      bool active = c < total_chunks;
      const std::uint32_t b = active ? buffer_of(c) : 0;
      const checkpoint_buffer& buf = buffers[b];
      const std::uint64_t off = active ? (c - buf.first_chunk) * chunk_bytes : 0;
      const std::uint64_t left = buf.extent - off;
      const std::uint32_t len =
          active ? static_cast<std::uint32_t>(left < chunk_bytes ? left : chunk_bytes) : 0;
      // Bytes of the buffer in this chunk; the rest is zero padding.
      const std::uint64_t have = active ? (buf.bytes - off < len ? buf.bytes - off : len) : 0;
      const bool staged = active && (buf.kind == checkpoint_buffer_kind::array || have < len);
      std::uint32_t set = ~0u;
      if (detail::warp::ballot(mask, staged) != 0) {
        set = acquire_scratch(mask, warp);
        if (set == ~0u && staged) {
          control->fault.record(checkpoint_phase::scratch_wait, b, nvme::status::deadline(), off, 0);
          active = false;
          ok = false;
        }
      }
      std::byte* data = !active ? nullptr : staged ? scratch_chunk(set, lane) : buf.device + off;
      const std::uint64_t lba = (base + buf.slot_offset + off) >> nvme::block_shift;
      const io_request req{lba, len >> nvme::block_shift, data};
      if constexpr (Write) {
        if (!stage_in(mask, active && staged, b, off, len, have, data)) ok = false;
        checksum_chunks(mask, active, data, len, (buf.slot_offset + off) / 8, sum);
        const nvme::status st = io.write(mask, active, req);
        if (active && !st.success()) {
          control->fault.record(checkpoint_phase::data_write, b, st, off, lba);
          ok = false;
        }
      } else {
        const nvme::status st = io.read(mask, active, req);
        const bool got = active && st.success();
        if (active && !st.success()) {
          control->fault.record(checkpoint_phase::data_read, b, st, off, lba);
          ok = false;
        }
        checksum_chunks(mask, got, data, len, (buf.slot_offset + off) / 8, sum);
        if (!stage_out(mask, got && staged, b, off, have, data)) ok = false;
      }
      if (set != ~0u) release_scratch(mask, set);
    }
  }

  // Every lane of `mask` helps: the lanes with `want` each have a chunk of
  // `len` bytes at `data`; the words go into each helper's `sum`.
  WARPSTORE_HD void checksum_chunks(unsigned mask, bool want, const std::byte* data,
                                    std::uint32_t len, std::uint64_t first_word,
                                    std::uint64_t& sum) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    unsigned todo = detail::warp::ballot(mask, want);
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      const auto* p = reinterpret_cast<const std::byte*>(
          detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(data), src));
      const std::uint32_t n = detail::warp::shfl(mask, len, src) / 8;
      const std::uint64_t w0 = detail::warp::shfl(mask, first_word, src);
      for (std::uint32_t k = rank; k < n; k += lanes) sum += ckpt::mix(detail::load_word(p + 8ull * k), w0 + k);
    }
    detail::warp::sync(mask);
  }

  // Fills the staged chunks of the lanes with `want` (a tail of a device
  // buffer, or a piece of an array) with the buffer's bytes, zero padded.
  WARPSTORE_HD bool stage_in(unsigned mask, bool want, std::uint32_t b, std::uint64_t off,
                             std::uint32_t len, std::uint64_t have, std::byte* data) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    bool ok = true;
    unsigned todo = detail::warp::ballot(mask, want);
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      const checkpoint_buffer& buf = buffers[detail::warp::shfl(mask, b, src)];
      auto* dst = reinterpret_cast<std::byte*>(
          detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(data), src));
      const std::uint64_t o = detail::warp::shfl(mask, off, src);
      const std::uint64_t h = detail::warp::shfl(mask, have, src);
      const std::uint32_t n = detail::warp::shfl(mask, len, src);
      std::uint64_t from = 0;
      if (buf.kind == checkpoint_buffer_kind::array) {
        // read_span groups the calling lanes itself: the whole warp calls.
        if (!buf.array.read_span(o, h, dst)) {
          if (detail::warp::lane() == src)
            control->fault.record(checkpoint_phase::array_read, b, nvme::status::ok(), o, 0);
          ok = false;
        }
        from = h;
      }
      for (std::uint64_t k = from + rank; k < n; k += lanes) dst[k] = k < h ? buf.device[o + k] : std::byte{0};
      detail::warp::sync(mask);
    }
    return detail::warp::ballot(mask, !ok) == 0;
  }

  // The other way: the buffer's bytes of each staged chunk leave staging.
  WARPSTORE_HD bool stage_out(unsigned mask, bool want, std::uint32_t b, std::uint64_t off,
                              std::uint64_t have, const std::byte* data) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    bool ok = true;
    unsigned todo = detail::warp::ballot(mask, want);
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      const checkpoint_buffer& buf = buffers[detail::warp::shfl(mask, b, src)];
      const auto* from = reinterpret_cast<const std::byte*>(
          detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(data), src));
      const std::uint64_t o = detail::warp::shfl(mask, off, src);
      const std::uint64_t h = detail::warp::shfl(mask, have, src);
      if (buf.kind == checkpoint_buffer_kind::array) {
        if (!buf.array.write_span(o, h, from)) {
          if (detail::warp::lane() == src)
            control->fault.record(checkpoint_phase::array_write, b, nvme::status::ok(), o, 0);
          ok = false;
        }
      } else {
        for (std::uint64_t k = rank; k < h; k += lanes) buf.device[o + k] = from[k];
      }
      detail::warp::sync(mask);
    }
    return detail::warp::ballot(mask, !ok) == 0;
  }

  // Adds this warp's checksum and arrives; true on the warp that arrived
  // last (every other warp's writes have completed before it sees the count).
  WARPSTORE_HD bool arrive(unsigned mask, std::uint64_t warps, std::uint64_t sum, bool ok) const {
    const std::uint64_t total = detail::warp_sum_u64(mask, sum);
    const bool all_ok = detail::warp::ballot(mask, !ok) == 0;
    const unsigned leader = detail::warp::first_lane(mask);
    std::uint32_t last = 0;
    if (detail::warp::lane() == leader) {
      if (!all_ok) detail::device_atomic<std::uint32_t>(control->failed).store(1, detail::memory_order_relaxed);
      detail::device_atomic<std::uint64_t>(control->checksum).fetch_add(total, detail::memory_order_relaxed);
      const std::uint32_t before = detail::device_atomic<std::uint32_t>(control->arrivals)
                                       .fetch_add(1, detail::memory_order_acq_rel);
      last = before + 1 == warps ? 1u : 0u;
    }
    return detail::warp::shfl(mask, last, leader) != 0;
  }

  // The last warp: resets the coordination words for the next operation.
  WARPSTORE_HD void reset_operation() const {
    store(control->checksum, std::uint64_t{0});
    store(control->failed, 0u);
    store(control->select_state, 0u);
    detail::device_atomic<std::uint32_t>(control->arrivals).store(0, detail::memory_order_release);
  }

  // The last warp of a checkpoint: FLUSH, record, FLUSH.
  WARPSTORE_HD checkpoint_outcome commit(unsigned mask, std::uint32_t slot) const {
    const unsigned leader = detail::warp::first_lane(mask);
    const bool is_leader = detail::warp::lane() == leader;
    const bool failed_before = load(control->failed) != 0;
    const std::uint64_t seq = load(control->next_sequence);
    const std::uint64_t record_lba = slot * ckpt::record_stride >> nvme::block_shift;
    std::uint32_t good = failed_before ? 0u : 1u;
    if (good && is_leader) {
      const nvme::status st = io.flush();
      if (!st.success()) {
        control->fault.record(checkpoint_phase::flush_data, ~0u, st, 0, 0);
        good = 0;
      }
    }
    good = detail::warp::shfl(mask, good, leader);
    std::byte* rec_bytes = record_io + 2 * ckpt::record_stride;
    if (good) {
      const unsigned lanes = detail::warp::popcount(mask);
      const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
      for (std::uint32_t k = rank; k < record_bytes; k += lanes) rec_bytes[k] = std::byte{0};
      detail::warp::sync(mask);
      if (is_leader) {
        auto* r = reinterpret_cast<checkpoint_record*>(rec_bytes);
        r->magic = ckpt::magic;
        r->version = ckpt::version;
        r->slot = slot;
        r->sequence = seq;
        r->data_offset = slot_offsets[slot];
        r->data_bytes = data_bytes;
        r->data_checksum = load(control->checksum);
        r->layout_hash = layout_hash;
        r->buffers = buffer_count;
        r->chunk_bytes = chunk_bytes;
        for (std::uint32_t k = 0; k < ckpt::record_sizes; ++k) r->sizes[k] = sizes[k];
        r->written_ns = detail::now_ns();
        r->record_checksum = r->compute_checksum();
      }
      detail::warp::sync(mask);
      const io_request req{record_lba, record_bytes >> nvme::block_shift, rec_bytes};
      nvme::status st = io.write(mask, is_leader, req);
      if (is_leader && !st.success()) {
        control->fault.record(checkpoint_phase::record_write, ~0u, st, 0, record_lba);
        good = 0;
      }
      if (is_leader && good) {
        st = io.flush();
        if (!st.success()) {
          control->fault.record(checkpoint_phase::flush_record, ~0u, st, 0, 0);
          good = 0;
        }
      }
      good = detail::warp::shfl(mask, good, leader);
    }
    const checkpoint_outcome out = good ? checkpoint_outcome::committed : checkpoint_outcome::failed;
    if (is_leader) {
      if (good) {
        control->states[slot] = record_state::valid;
        control->sequences[slot] = seq;
        control->layouts[slot] = layout_hash;
        control->buffer_counts[slot] = buffer_count;
        store(control->next_slot, 1u - slot);
        store(control->next_sequence, seq + 1);
        store(control->exclude_from, ~std::uint64_t{0});
      }
      set_outcome(out, seq, 0);
      reset_operation();
    }
    detail::warp::sync(mask);
    return out;
  }

  // Reads both records into record_io (lanes 0 and 1 of the warp, or one
  // after the other on the CPU target). False (recorded) on failure.
  WARPSTORE_HD bool read_records(unsigned mask) const {
    bool ok = true;
    for (std::uint32_t first = 0; first < 2; first += detail::warp::size) {
      const std::uint32_t s = first + detail::warp::lane();
      const bool active = s < 2;
      const std::uint64_t lba = (active ? s : 0) * ckpt::record_stride >> nvme::block_shift;
      const io_request req{lba, record_bytes >> nvme::block_shift,
                           record_io + (active ? s : 0) * ckpt::record_stride};
      const nvme::status st = io.read(mask, active, req);
      if (active && !st.success()) {
        control->fault.record(checkpoint_phase::record_read, ~0u, st, 0, lba);
        ok = false;
      }
    }
    return detail::warp::ballot(mask, !ok) == 0;
  }

  // One lane, after read_records: each record's state, the inactive slot
  // and the next sequence.
  WARPSTORE_HD void classify_records() const {
    std::uint64_t newest = 0;
    std::uint32_t newest_slot = 1;  // none valid: slot 0 goes first
    for (std::uint32_t s = 0; s < 2; ++s) {
      const auto* r = reinterpret_cast<const checkpoint_record*>(record_io + s * ckpt::record_stride);
      const auto* w = reinterpret_cast<const std::uint64_t*>(r);
      bool zero = true;
      for (std::uint32_t k = 0; k < sizeof(checkpoint_record) / 8; ++k) zero = zero && w[k] == 0;
      record_state st = record_state::invalid;
      if (zero) st = record_state::empty;
      else if (r->magic_ok() && r->record_checksum == r->compute_checksum() && r->slot == s &&
               r->sequence != 0 && r->data_bytes % 8 == 0)
        st = record_state::valid;
      control->states[s] = st;
      control->sequences[s] = st == record_state::valid ? r->sequence : 0;
      control->layouts[s] = st == record_state::valid ? r->layout_hash : 0;
      control->buffer_counts[s] = st == record_state::valid ? r->buffers : 0;
      if (st == record_state::valid && r->sequence > newest) {
        newest = r->sequence;
        newest_slot = s;
      }
    }
    store(control->next_slot, 1u - newest_slot);
    store(control->next_sequence, newest + 1);
  }

  // Restore, every warp: the first to come reads the records and chooses;
  // the others wait (bounded) for its choice. 2: a slot to read; 3: failed;
  // 4: nothing to read (the outcome says why).
  WARPSTORE_HD std::uint32_t select(unsigned mask) const {
    const unsigned leader = detail::warp::first_lane(mask);
    std::uint32_t role = 0;  // 1: this warp chooses
    if (detail::warp::lane() == leader) {
      std::uint32_t expected = 0;
      role = detail::device_atomic<std::uint32_t>(control->select_state)
                     .compare_exchange_strong(expected, 1, detail::memory_order_acq_rel,
                                              detail::memory_order_acquire)
                 ? 1u
                 : 0u;
    }
    role = detail::warp::shfl(mask, role, leader);
    std::uint32_t state = 0;
    if (role == 1) {
      const bool ok = read_records(mask);
      if (detail::warp::lane() == leader) {
        state = 3;
        if (ok) {
          classify_records();
          state = choose();
        }
        detail::device_atomic<std::uint32_t>(control->select_state).store(state, detail::memory_order_release);
      }
    } else if (detail::warp::lane() == leader) {
      detail::deadline dl(timeout_ns);
      for (;;) {
        state = detail::device_atomic<std::uint32_t>(control->select_state).load(detail::memory_order_acquire);
        if (state >= 2) break;
        if (dl.expired()) {
          control->fault.record(checkpoint_phase::select_wait, ~0u, nvme::status::deadline(), 0, 0);
          state = 3;
          break;
        }
        dl.pause();
      }
    }
    return detail::warp::shfl(mask, state, leader);
  }

  // One lane: the newest valid record not excluded.
  WARPSTORE_HD std::uint32_t choose() const {
    const std::uint64_t bound = load(control->exclude_from);
    std::uint32_t best = 2;
    for (std::uint32_t s = 0; s < 2; ++s)
      if (control->states[s] == record_state::valid && control->sequences[s] < bound &&
          (best == 2 || control->sequences[s] > control->sequences[best]))
        best = s;
    if (best == 2) {
      control->outcome = checkpoint_outcome::empty;
      return 4;
    }
    const auto* r = reinterpret_cast<const checkpoint_record*>(record_io + best * ckpt::record_stride);
    control->restore_slot = best;
    control->restore_sequence = r->sequence;
    control->restore_checksum = r->data_checksum;
    if (r->layout_hash != layout_hash || r->buffers != buffer_count || r->data_bytes != data_bytes ||
        r->data_offset != slot_offsets[best]) {
      control->outcome = checkpoint_outcome::layout_mismatch;
      return 4;
    }
    return 2;
  }

  WARPSTORE_HD checkpoint_outcome finish_restore(unsigned mask, std::uint32_t chosen) const {
    checkpoint_outcome out = checkpoint_outcome::failed;
    if (detail::warp::lane() == detail::warp::first_lane(mask)) {
      const std::uint64_t seq = load(control->restore_sequence);
      const std::uint64_t sum = load(control->checksum);
      if (chosen == 4) {
        out = control->outcome;
        set_outcome(out, out == checkpoint_outcome::layout_mismatch ? seq : 0, 0);
      } else if (chosen != 2 || load(control->failed) != 0) {
        set_outcome(out, seq, 0);
      } else if (sum != load(control->restore_checksum)) {
        out = checkpoint_outcome::data_mismatch;
        store(control->exclude_from, seq);
        set_outcome(out, seq, sum);
      } else {
        out = checkpoint_outcome::restored;
        // The next checkpoint must not overwrite what was just restored.
        store(control->next_slot, 1u - load(control->restore_slot));
        store(control->exclude_from, ~std::uint64_t{0});
        set_outcome(out, seq, sum);
      }
      reset_operation();
    }
    return static_cast<checkpoint_outcome>(
        detail::warp::shfl(mask, static_cast<std::uint32_t>(out), detail::warp::first_lane(mask)));
  }
};

// ---- host side ---------------------------------------------------------------

// Raised for a checkpoint or restore that failed: names the group's file,
// the phase, the buffer and byte offset, the LBA and the NVMe status. `info`
// carries what the thrower knows (path, kind, LBA); its status is `st`, and
// its kind, where not given, follows from `st` (runtime when `st` is ok).
class checkpoint_error : public ::warpstore::detail::error_as<std::runtime_error> {
 public:
  checkpoint_error(const std::string& what, checkpoint_phase phase, nvme::status st,
                   error_info info = {})
      : error_as(with_status(std::move(info), st), what), phase_(phase) {}
  checkpoint_phase phase() const { return phase_; }

 private:
  static error_info with_status(error_info info, nvme::status st) {
    info.status = st;
    if (info.kind == error_kind::none) info.kind = st.success() ? error_kind::runtime : kind_of(st);
    return info;
  }
  checkpoint_phase phase_;
};

// What the file held, and what restore did with it.
struct restore_result {
  checkpoint_outcome outcome = checkpoint_outcome::none;  // restored or empty
  std::uint64_t sequence = 0;  // the checkpoint restored (0 when empty)
  std::uint32_t skipped = 0;   // newer records whose data failed its checksum
  bool restored() const { return outcome == checkpoint_outcome::restored; }
};

// Where the pieces of a group's file are (byte offsets).
struct checkpoint_layout {
  std::uint64_t record_offset[2] = {0, ckpt::record_stride};
  std::uint64_t slot_offset[2] = {0, 0};
  std::uint64_t data_bytes = 0;   // per slot
  std::uint64_t file_bytes = 0;   // the smallest file that holds both slots
  std::vector<std::uint64_t> buffer_offset;  // within a slot, per buffer
  std::uint64_t layout_hash = 0;
};

struct checkpoint_options {
  // Staging for buffer tails and arrays (rounded to whole sets of one chunk
  // per lane; at least two sets).
  std::size_t scratch_bytes = std::size_t{16} << 20;
  // A file holding valid records of other buffers (another layout) is refused
  // at open unless this is set; then its next checkpoint overwrites them.
  bool discard_foreign = false;
  // Warps of the host form's launches (0: enough for the queues).
  std::uint32_t warps = 0;
};

using controller_opener =
    std::function<std::shared_ptr<controller>(const std::string& path, const options& opts)>;

class checkpoint_group {
 public:
  checkpoint_group();
  ~checkpoint_group();
  checkpoint_group(const checkpoint_group&) = delete;
  checkpoint_group& operator=(const checkpoint_group&) = delete;

  // Registration, before open(). A device range: 16-byte aligned GPU memory
  // (host memory on the CPU target), bytes > 0.
  checkpoint_group& add(void* device, std::uint64_t bytes, std::string name);
  // A warpstore array (its elements, read and written through its cache).
  // The array must outlive the group; restoring needs it writable.
  template <class T>
  checkpoint_group& add(array<T>& a, std::string name) {
    return add_array(a, a.byte_ref(), a.size() * sizeof(T), std::move(name));
  }

  // Sizes `path` for the group (creating it, or growing it, with zeros),
  // opens it read-write through `open` (default: make_controller), reads its
  // records and sets the next slot. Raises if the file holds valid records of
  // another layout (unless discard_foreign), or on any I/O failure.
  void open(const std::string& path, const options& opts,
            const controller_opener& open = nullptr, const checkpoint_options& copts = {});
  // The layout of the file for these buffers (before or after open).
  checkpoint_layout layout() const;

  // Host forms. checkpoint() returns the sequence it committed, once
  // durable; raises checkpoint_error on failure (the previous checkpoint
  // stays the newest). restore() brings back the newest checkpoint whose data
  // verifies, or reports empty (nothing touched); raises on I/O failure,
  // on a layout mismatch, or when no record's data verifies.
  std::uint64_t checkpoint();
  restore_result restore();

  // Device form: kernels call ref().checkpoint(warp, warps) / restore(...);
  // then finish() reads what the operation did, raises its failure, makes a
  // memory controller's writes durable, and returns the outcome.
  checkpoint_ref ref() const;
  checkpoint_outcome finish();

  // The sequence of the newest valid record seen (0: none).
  std::uint64_t latest_sequence() const;
  std::uint64_t next_sequence() const;
  const std::string& path() const { return path_; }
  const std::shared_ptr<controller>& shared_controller() const { return controller_; }
  std::uint32_t buffer_count() const { return static_cast<std::uint32_t>(buffers_.size()); }

 private:
  checkpoint_group& add_array(detail::array_base& a, const array_ref<std::byte>& view,
                              std::uint64_t bytes, std::string name);
  void require_open(const char* what) const;
  checkpoint_control read_control() const;
  // Runs one operation on the target (kernel or threads), waits, and
  // checks it like finish().
  checkpoint_outcome run_and_check(int op, std::uint32_t warps, const char* what);
  checkpoint_outcome finish_named(const char* what);
  [[noreturn]] void raise(const checkpoint_control& c, const char* what) const;
  std::string describe_buffer(std::uint32_t b) const;
  std::uint32_t default_warps() const;
  std::uint64_t seen_operations_ = 0;

  struct entry {
    checkpoint_buffer buffer;
    std::string name;
    detail::array_base* array = nullptr;
  };
  std::vector<entry> buffers_;
  std::string path_;
  options opts_;
  checkpoint_options copts_;
  std::shared_ptr<controller> controller_;
  runtime::device_ptr<checkpoint_buffer> device_buffers_;
  runtime::device_ptr<checkpoint_control> control_;
  runtime::device_ptr<std::byte> record_io_;
  runtime::device_ptr<std::byte> scratch_;
  runtime::device_ptr<std::uint32_t> scratch_locks_;
  checkpoint_ref ref_{};
};

namespace detail {
// Per target (src/durable/checkpoint_{cpu.cpp,gpu.cu}): runs `op` (0 scan,
// 1 checkpoint, 2 restore) on `warps` warps and waits.
void run_checkpoint_op(const checkpoint_ref& ref, int op, std::uint32_t warps);
// Lanes of a warp on the target (32 on the GPU, 1 on the CPU).
std::uint32_t checkpoint_warp_size();
// Warps the host forms use for `chunks` chunks.
std::uint32_t checkpoint_default_warps(std::uint64_t chunks);
}  // namespace detail

}  // namespace warpstore
