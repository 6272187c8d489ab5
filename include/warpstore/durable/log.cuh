// A write-ahead (undo) log on storage for transactional kernels.
//
// Each warp appends to a region of the log that only it writes, so an append
// takes no lock and no global atomic: the lanes of a warp compute their
// entries' offsets with a warp prefix sum, copy them into the region's tail
// line (a two-line ring in GPU memory), and every line an append completes
// goes to storage whole, one WRITE through the queues. A commit appends a
// commit record, writes the partial tail line and FLUSHes. Recovery (host)
// finds the transactions whose entries reached the log without their commit
// and writes their before-images back, newest first, then truncates the log by
// starting a new epoch.
//
// ON STORAGE (L = the line size the log was formatted with, a power of two,
// 512 B to 64 KiB; every command moves exactly one whole line)
//
//   line 0, line 1   superblock copies A and B (log_superblock in the first
//                    64 bytes, the rest zero). The copy written for epoch e is
//                    e % 2; the valid copy (magic, version, checksum) with
//                    the higher epoch is the log's current epoch.
//   line 2 + r * (region_bytes / L) ...
//                    region r, r in [0, regions]: regions 0 .. regions-1
//                    belong to device warps (one warp at a time per region),
//                    region `regions` to the host (host_append, commit).
//
//   A region holds entries back to back from byte 0, each 32-byte aligned:
//     entry_header (32 B): checksum, magic, kind, epoch, payload_bytes, txn,
//                          target
//     payload (payload_bytes, zero-padded to a multiple of 32)
//   kinds: undo   (payload = the before-image of `payload_bytes` bytes at
//                  byte `target` of the data file the transactions update)
//          commit (transaction `txn` committed)
//          record (an opaque payload recovery never applies)
//   The checksum covers the whole entry (header with the checksum zeroed,
//   padded payload) and is seeded with the epoch, the region and the entry's
//   byte position, so an entry copied to another place, left over from an
//   earlier epoch, or torn (some of its blocks old, some new) does not check.
//   A region's committed tail is the end of its last commit record: the
//   commit record is the region's persisted tail sentinel (it carries the
//   epoch and is checksummed like every entry). Scanning a region stops at the
//   first entry that does not check: a zero or old-epoch header is the clean
//   end; a header of the current epoch that fails its checksum or its bounds
//   is a torn tail, counted in recovery_report::torn_regions.
//
// PROTOCOL (undo logging, data forced before commit)
//   1. append the before-image of every location the transaction will
//      overwrite (log_ref::append), write the tail (write_tail), FLUSH;
//   2. only then update the data (array stores, write-back) and make the data
//      durable (array flush: write-back + FLUSH);
//   3. commit: a commit record + FLUSH (log_ref::commit or
//      write_ahead_log::commit), or truncate() when no other transaction is
//      in flight (a new epoch retires every entry at once).
//   Transaction ids must grow over time, and a location may be written by at
//   most one uncommitted transaction at a time (what two-phase locking or a
//   batch of distinct keys gives).
//
// WHY IT IS CRASH-SAFE
//   - A region is written by one warp in increasing byte order, each WRITE
//     waits for its completion, and a FLUSH covers every write completed
//     before it. So what survives a crash in a region is a durable prefix,
//     possibly followed by some later, non-durable bytes; the later bytes can
//     only belong to transactions whose step 1 never completed, whose data
//     therefore was never changed. Undoing such an entry writes back the
//     value the location still holds: harmless.
//   - A transaction whose step 1 completed has all its entries in the durable
//     prefix. If its commit record (or the truncation) is not durable, its
//     data may be partly written: recovery writes every before-image back,
//     newest transaction first, which restores the state before it.
//   - A commit record (or the new epoch) becomes durable only after step 2's
//     FLUSH, so a committed transaction's data is durable and never undone.
//   - Rewriting the tail line repeats the bytes already there, so a torn
//     rewrite never damages what an earlier FLUSH made durable.
//
// RECOVERY, SAFE TO INTERRUPT AND RERUN (write_ahead_log::recover)
//   scan every region -> find partial transactions -> read the data lines
//   their before-images cover, patch them newest first, write them back ->
//   FLUSH the data -> write the superblock copy of epoch e+1 -> FLUSH the log.
//   Every step before the superblock write leaves the log as it was, and
//   writing the same before-images again gives the same bytes, so a crash at
//   any point followed by another recovery ends in the same state. The new
//   superblock goes to the copy not holding epoch e, so a torn superblock
//   write leaves epoch e readable (and recovery simply runs again).
//
// The memory controller's FLUSH only orders writes into pinned host memory;
// the host's write_ahead_log::flush() (and array flush) make them durable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "warpstore/controller.h"
#include "warpstore/detail/hash.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"
#include "warpstore/io.cuh"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore::durable {

inline constexpr std::uint64_t log_magic = 0x3130474f4c535357ull;  // "WSSLOG01"
inline constexpr std::uint32_t log_version = 1;
inline constexpr std::uint16_t entry_magic = 0x4c57;               // "WL"
inline constexpr std::uint32_t entry_align = 32;
inline constexpr std::uint32_t superblock_lines = 2;

enum class entry_kind : std::uint8_t { undo = 1, commit = 2, record = 3 };

struct entry_header {
  std::uint32_t checksum;
  std::uint16_t magic;
  std::uint8_t kind;
  std::uint8_t reserved;
  std::uint32_t epoch;
  std::uint32_t payload_bytes;
  std::uint64_t txn;
  std::uint64_t target;
};
static_assert(sizeof(entry_header) == 32, "an entry header is 32 bytes");

struct log_superblock {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t line_size;
  std::uint32_t regions;  // device regions; one more belongs to the host
  std::uint32_t epoch;
  std::uint64_t region_bytes;
  std::uint64_t reserved[3];
  std::uint64_t checksum;  // of the 56 bytes before it
};
static_assert(sizeof(log_superblock) == 64, "the superblock is 64 bytes");

// What one lane appends.
struct log_entry {
  entry_kind kind = entry_kind::record;
  std::uint64_t txn = 0;
  std::uint64_t target = 0;       // undo: byte offset of the before-image in the data file
  const void* payload = nullptr;  // any alignment
  std::uint32_t payload_bytes = 0;
};

namespace detail {

// A 64-bit hash over 8-byte words (not cryptographic: it tells torn, stale
// and misplaced entries from good ones).
struct hasher {
  std::uint64_t h;
  WARPSTORE_HD explicit hasher(std::uint64_t seed)
      : h(warpstore::detail::mix64(seed ^ warpstore::detail::golden_gamma)) {}
  WARPSTORE_HD void add(std::uint64_t w) {
    h = warpstore::detail::mix64(h ^ w) + warpstore::detail::golden_gamma;
  }
};

WARPSTORE_HD inline std::uint64_t entry_seed(std::uint32_t epoch, std::uint32_t region,
                                             std::uint64_t pos) {
  return (std::uint64_t{epoch} << 32 | region) ^ warpstore::detail::mix64(pos + 1);
}

// Bytes an entry with `payload_bytes` of payload takes in a region.
WARPSTORE_HD inline std::uint32_t entry_bytes(std::uint32_t payload_bytes) {
  return static_cast<std::uint32_t>(sizeof(entry_header)) +
         ((payload_bytes + entry_align - 1) & ~(entry_align - 1));
}

// The header of entry `e` written in `epoch`, checksum zero.
WARPSTORE_HD inline entry_header entry_header_of(std::uint32_t epoch, const log_entry& e) {
  entry_header h{};
  h.magic = entry_magic;
  h.kind = static_cast<std::uint8_t>(e.kind);
  h.epoch = epoch;
  h.payload_bytes = e.payload_bytes;
  h.txn = e.txn;
  h.target = e.target;
  return h;
}

// Word `w` (8 bytes) of the encoded entry, checksum field zero.
WARPSTORE_HD inline std::uint64_t entry_word(const entry_header& h, const void* payload,
                                             std::uint32_t w) {
  std::uint64_t v = 0;
  if (w < 4) {
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(&h) + 8 * w, 8);
    return v;
  }
  const std::uint32_t at = (w - 4) * 8;
  if (at >= h.payload_bytes) return 0;
  const std::uint32_t n = h.payload_bytes - at < 8 ? h.payload_bytes - at : 8;
  std::memcpy(&v, static_cast<const unsigned char*>(payload) + at, n);
  return v;
}

// Encodes `e`, written in `epoch`, at byte `pos` of region `region`: calls
// put(k, word) for every 8-byte word k of the entry, word 0 (the one with
// the checksum) last. The device ring and the host's tail line both use it.
template <class Put>
WARPSTORE_HD inline void encode_entry(std::uint32_t epoch, std::uint32_t region, std::uint64_t pos,
                                      const log_entry& e, Put&& put) {
  entry_header h = entry_header_of(epoch, e);
  const std::uint32_t words = entry_bytes(e.payload_bytes) / 8;
  hasher hs(entry_seed(epoch, region, pos));
  for (std::uint32_t k = 0; k < words; ++k) {
    const std::uint64_t v = entry_word(h, e.payload, k);
    hs.add(v);
    if (k != 0) put(k, v);
  }
  h.checksum = static_cast<std::uint32_t>(hs.h);
  put(0u, entry_word(h, nullptr, 0));
}

WARPSTORE_HD inline std::uint64_t superblock_checksum(const log_superblock& s) {
  hasher h(log_magic);
  const auto* p = reinterpret_cast<const unsigned char*>(&s);
  for (std::uint32_t w = 0; w < 7; ++w) {
    std::uint64_t v;
    std::memcpy(&v, p + 8 * w, 8);
    h.add(v);
  }
  return h.h;
}

// Last set lane of a non-empty mask.
WARPSTORE_HD inline unsigned last_lane(unsigned mask) {
#if WARPSTORE_ON_GPU
  return 31u - static_cast<unsigned>(__clz(static_cast<int>(mask)));
#else
  return 31u - static_cast<unsigned>(__builtin_clz(mask));
#endif
}

}  // namespace detail

// Device view of a log, passed by value to kernels. Region r (r < regions)
// must be appended to by one warp at a time (for example the warp with
// global index r); regions keep their tails across launches until the host
// truncates the log.
struct log_ref {
  io_ref io;
  std::byte* ring;          // [regions + 1][2][line_size], GPU memory: each region's tail lines
  std::uint64_t* tails;     // [regions + 1][2]: bytes appended, bytes written to storage
  error_record* errors;     // first failure, for write_ahead_log::check()
  std::uint64_t first_block;   // LBA of region 0
  std::uint64_t region_bytes;  // capacity of a region, a multiple of line_size
  std::uint32_t line_size;
  std::uint32_t regions;
  std::uint32_t epoch;

  // Warp-collective: every lane of `mask` calls with the same `region`;
  // lanes with `active` append `e` (payload at most line_size - 32 bytes).
  // Entries land in lane order; lines they fill go to storage at once, the
  // partial tail line at write_tail() or commit(). Returns false on every
  // lane if anything failed (region full, a WRITE failed), recorded for
  // write_ahead_log::check().
  WARPSTORE_HD bool append(unsigned mask, std::uint32_t region, bool active,
                           const log_entry& e) const {
    namespace w = warpstore::detail::warp;
    const unsigned leader = w::first_lane(mask);
    if (region >= regions) {
      if (w::lane() == leader) record(nvme::sc::invalid_field, region, 0);
      return false;
    }
    bool ok = true;
    std::uint32_t bytes = 0;
    if (active) {
      if (e.payload_bytes + sizeof(entry_header) > line_size) {
        record(nvme::sc::invalid_field, region, e.payload_bytes);
        ok = false;
      } else {
        bytes = detail::entry_bytes(e.payload_bytes);
      }
    }
    std::uint64_t* t = tails + 2 * std::size_t{region};
    std::uint64_t tail = warpstore::detail::device_atomic<std::uint64_t>(t[0]).load(
        warpstore::detail::memory_order_relaxed);
    bool pending = bytes != 0;
    while (w::ballot(mask, pending) != 0) {
      // This lane's offset among the pending lanes (a warp prefix sum): the
      // first pending lanes whose entries fit in one line go this round.
      std::uint32_t off = 0;
      for (unsigned m = mask; m != 0; m &= m - 1) {
        const unsigned src = w::first_lane(m);
        const std::uint32_t v = w::shfl(mask, pending ? bytes : 0u, src);
        if (src < w::lane()) off += v;
      }
      const bool take = pending && off + bytes <= line_size;
      const unsigned takers = w::ballot(mask, take);
      const std::uint32_t total =
          w::shfl(mask, take ? off + bytes : 0u, detail::last_lane(takers));
      if (tail + total > region_bytes) {
        if (w::lane() == leader) record(nvme::sc::lba_out_of_range, region, tail + total);
        return false;
      }
      // Lines this round starts fresh are cleared first: bytes past the tail
      // of a written line must not hold what the ring slot held before.
      const std::uint64_t first_line = tail / line_size;
      const std::uint64_t last_line = (tail + total - 1) / line_size;
      if (tail % line_size == 0) clear_slot(mask, region, first_line);
      if (last_line != first_line) clear_slot(mask, region, last_line);
      w::sync(mask);
      if (take) encode(region, tail + off, e);
      w::sync(mask);
      tail += total;
      pending = pending && !take;
      ok = write_lines(mask, region, tail, false) && ok;
    }
    if (w::lane() == leader)
      warpstore::detail::device_atomic<std::uint64_t>(t[0]).store(
          tail, warpstore::detail::memory_order_relaxed);
    w::sync(mask);
    return w::ballot(mask, !ok) == 0;
  }

  // Warp-collective: writes the region's partial tail line (not durable
  // until a FLUSH).
  WARPSTORE_HD bool write_tail(unsigned mask, std::uint32_t region) const {
    if (region >= regions) return false;
    const std::uint64_t tail = warpstore::detail::device_atomic<std::uint64_t>(
                                   tails[2 * std::size_t{region}])
                                   .load(warpstore::detail::memory_order_relaxed);
    return write_lines(mask, region, tail, true);
  }

  // Warp-collective: one FLUSH through the queues (the leader lane sends it):
  // every entry written before it is durable when it returns (memory
  // controller: in pinned host memory; the host flush takes it to the file).
  WARPSTORE_HD bool flush(unsigned mask) const {
    namespace w = warpstore::detail::warp;
    const unsigned leader = w::first_lane(mask);
    std::uint32_t good = 1;
    if (w::lane() == leader) {
      const nvme::status st = io.flush();
      if (!st.success()) {
        errors->record_failed(0, st, 0, 0);
        good = 0;
      }
    }
    return w::shfl(mask, good, leader) != 0;
  }

  // Warp-collective: appends the commit record of `txn`, writes the tail
  // and, with `durable`, FLUSHes. Once it returns true with `durable`, the
  // transaction survives any crash.
  WARPSTORE_HD bool commit(unsigned mask, std::uint32_t region, std::uint64_t txn,
                           bool durable = true) const {
    namespace w = warpstore::detail::warp;
    log_entry c;
    c.kind = entry_kind::commit;
    c.txn = txn;
    bool ok = append(mask, region, w::lane() == w::first_lane(mask), c);
    ok = write_tail(mask, region) && ok;
    if (durable) ok = flush(mask) && ok;
    return ok;
  }

  // Bytes appended to `region` in this epoch.
  WARPSTORE_HD std::uint64_t tail_of(std::uint32_t region) const {
    return warpstore::detail::device_atomic<std::uint64_t>(tails[2 * std::size_t{region}])
        .load(warpstore::detail::memory_order_relaxed);
  }

 private:
  WARPSTORE_HD std::byte* slot(std::uint32_t region, std::uint64_t line) const {
    return ring + (std::size_t{region} * 2 + (line & 1)) * line_size;
  }
  WARPSTORE_HD std::uint64_t* word_at(std::uint32_t region, std::uint64_t pos) const {
    return reinterpret_cast<std::uint64_t*>(slot(region, pos / line_size) + pos % line_size);
  }
  WARPSTORE_HD std::uint64_t region_blocks() const { return region_bytes >> nvme::block_shift; }

  WARPSTORE_HD void clear_slot(unsigned mask, std::uint32_t region, std::uint64_t line) const {
    namespace w = warpstore::detail::warp;
    const unsigned lanes = w::popcount(mask), rank = w::rank_in(mask, w::lane());
    auto* p = reinterpret_cast<std::uint64_t*>(slot(region, line));
    for (std::uint32_t k = rank; k < line_size / 8; k += lanes) p[k] = 0;
  }

  // One lane: encodes `e` at byte `pos` of the region's ring, the word with
  // the checksum last.
  WARPSTORE_HD void encode(std::uint32_t region, std::uint64_t pos, const log_entry& e) const {
    detail::encode_entry(epoch, region, pos, e, [&](std::uint32_t k, std::uint64_t v) {
      *word_at(region, pos + 8 * k) = v;
    });
  }

  // Warp-collective: writes every line of the region that is complete below
  // `tail` and not yet written (and with `partial`, the line `tail` ends in),
  // one lane per line, then advances the region's written mark.
  WARPSTORE_HD bool write_lines(unsigned mask, std::uint32_t region, std::uint64_t tail,
                                bool partial) const {
    namespace w = warpstore::detail::warp;
    std::uint64_t* t = tails + 2 * std::size_t{region};
    const std::uint64_t written =
        warpstore::detail::device_atomic<std::uint64_t>(t[1]).load(
            warpstore::detail::memory_order_relaxed);
    const std::uint64_t from = written / line_size;
    const std::uint64_t to = partial ? (tail + line_size - 1) / line_size : tail / line_size;
    if (written >= tail || from >= to) return true;
    // Bytes in GPU memory reach the controller (copy engine, PCIe) before
    // the command that names them.
    warpstore::detail::fence_release_system();
    w::sync(mask);
    const unsigned lanes = w::popcount(mask), rank = w::rank_in(mask, w::lane());
    bool ok = true;
    for (std::uint64_t base = from; base < to; base += lanes) {
      const std::uint64_t line = base + rank;
      const bool active = line < to;
      io_request r{};
      if (active)
        r = io_request{first_block + region * region_blocks() +
                           line * (line_size >> nvme::block_shift),
                       line_size >> nvme::block_shift, slot(region, line)};
      const nvme::status st = io.write(mask, active, r);
      if (active && !st.success()) {
        errors->record_failed(region, st, line,
                       r.slba);
        ok = false;
      }
    }
    ok = w::ballot(mask, !ok) == 0;
    if (ok && w::lane() == w::first_lane(mask))
      warpstore::detail::device_atomic<std::uint64_t>(t[1]).store(
          partial ? tail : (tail / line_size) * line_size, warpstore::detail::memory_order_relaxed);
    w::sync(mask);
    return ok;
  }

  // A misuse (entry too large, bad region: invalid field) or a full region
  // (LBA out of range), told apart by write_ahead_log::check().
  WARPSTORE_HD void record(std::uint8_t code, std::uint32_t region, std::uint64_t what) const {
    errors->record(error_kind::io, region, nvme::status::make(nvme::status_type::generic, code),
                   what, 0);
  }
};

// Raised on the host for a log that cannot be used: a bad superblock, a
// region that filled, an I/O failure while reading, undoing or truncating.
// `info` carries what the thrower knows (path, kind, LBA); its status is
// `st`, and its kind, where not given, follows from `st`.
class log_error : public ::warpstore::detail::error_as<std::runtime_error> {
 public:
  explicit log_error(const std::string& what, nvme::status st = nvme::status::ok(),
                     error_info info = {})
      : error_as(with_status(std::move(info), st), what) {}

 private:
  static error_info with_status(error_info info, nvme::status st) {
    info.status = st;
    if (info.kind == error_kind::none) info.kind = st.success() ? error_kind::runtime : kind_of(st);
    return info;
  }
};

// Fixed when the log is formatted.
struct log_layout {
  std::uint32_t line_size = 4096;
  std::uint32_t regions = 64;                  // device regions (the host gets one more)
  std::uint64_t region_bytes = 256ull << 10;   // per region, a multiple of line_size

  std::uint64_t file_bytes() const {
    return (superblock_lines + std::uint64_t{regions + 1} * (region_bytes / line_size)) * line_size;
  }
  // Raises std::invalid_argument naming what is wrong.
  void validate() const;
};

// One entry found by a scan.
struct scanned_entry {
  entry_header header;
  std::uint32_t region;
  std::uint64_t pos;
  std::vector<std::byte> payload;
};

// What recover() found and did.
struct recovery_report {
  std::uint32_t epoch_found = 0;  // the epoch the log was in
  std::uint32_t epoch_now = 0;    // the epoch after truncation
  std::uint64_t entries = 0;      // valid entries of epoch_found
  std::uint64_t committed_txns = 0;
  std::uint64_t partial_txns = 0;
  std::vector<std::uint64_t> undone_txns;  // partial transactions, newest first
  std::uint64_t undone_entries = 0;        // before-images written back
  std::uint64_t lines_restored = 0;        // data lines rewritten
  std::uint32_t torn_regions = 0;          // regions ending in a damaged entry of epoch_found
  bool completed = false;                  // false: stopped by recovery_hooks::stop_after
};

// Recovery's steps, in order; a test can stop after any of them (as a crash
// would) and run recovery again.
enum class recovery_step { scanned, undo_written, undo_durable, superblock_written, done };

struct recovery_hooks {
  recovery_step stop_after = recovery_step::done;
};

// Host side of a log over one file (src/durable/log.cpp).
class write_ahead_log {
 public:
  // Formats a log of `layout` over `ctl`'s file (at least layout.file_bytes()
  // long, opened writable, with line size layout.line_size): both superblocks
  // (epoch 1 in copy B, copy A left invalid), FLUSH. Every region is empty.
  static void format(controller& ctl, const log_layout& layout);

  // Opens the formatted log over `ctl` (its file opened writable; opts.line_size
  // must be the log's). Reads and checks the superblocks. Before ref() or
  // any append, recover() must run.
  write_ahead_log(std::shared_ptr<controller> ctl, const options& opts);
  ~write_ahead_log();
  write_ahead_log(const write_ahead_log&) = delete;
  write_ahead_log& operator=(const write_ahead_log&) = delete;

  // Undoes every transaction whose entries are in the log without its
  // commit, writing the before-images through `data` (the data file's
  // controller, nullptr if the log holds no undo entries: then any would
  // raise), then truncates. No cache may hold lines of the data file while
  // this runs. Safe to interrupt at any point and to run again.
  recovery_report recover(controller* data, const recovery_hooks& hooks = {});

  // The device view (after recover()).
  log_ref ref() const;
  // Every entry written so far durable: a FLUSH through the queues, then the
  // controller's make_durable(). Raises what failed, like check().
  void flush();
  // Host-side commit of `txn` (a transaction whose entries many warps
  // appended): its commit record in the host region, written and flushed.
  void commit(std::uint64_t txn);
  // Appends `e` to the host region (written, not flushed).
  void host_append(const log_entry& e);
  // Starts a new epoch: every entry becomes invalid, the regions empty. Only
  // when no transaction is in flight; durable when it returns.
  void truncate();
  // Raises log_error for the first failure a kernel recorded through ref().
  void check();

  // All valid entries of the current epoch, region by region (reads the log
  // through the queues). For tests and benchmarks.
  std::vector<scanned_entry> scan(std::uint32_t* torn_regions = nullptr);

  const log_layout& layout() const { return layout_; }
  std::uint32_t epoch() const { return epoch_; }
  const std::string& path() const;
  // Bytes appended to each region in this epoch (regions + 1 values).
  std::vector<std::uint64_t> tails() const;

 private:
  struct scan_result;
  scan_result scan_regions();
  void write_superblock(std::uint32_t epoch);
  void reset_tails();

  std::shared_ptr<controller> ctl_;
  options opts_;
  log_layout layout_;
  std::uint32_t epoch_ = 0;
  bool recovered_ = false;
  runtime::device_ptr<std::byte> ring_;
  runtime::device_ptr<std::uint64_t> tails_;
  runtime::device_ptr<error_record> errors_;
  // The host region's tail line.
  std::vector<std::byte> host_line_;
  std::uint64_t host_tail_ = 0;
};

namespace detail {

// One whole-block transfer between a GPU buffer and storage.
struct block_io_request {
  std::uint64_t slba;
  std::uint32_t blocks;  // at most line_size / 512
  std::uint32_t reserved;
  std::uint64_t offset;  // into the task's buffer, a multiple of 512
};

// READs or WRITEs `count` requests through `io`, spread over warps, each
// lane one request; the status of each lands in statuses[i].
struct block_io_task {
  io_ref io;
  const block_io_request* requests;  // GPU memory
  std::uint16_t* statuses;           // GPU memory
  std::byte* buffer;                 // GPU memory
  std::uint64_t count;
  bool write;
  bool flush_only;  // one FLUSH instead (statuses[0])

  WARPSTORE_HD void run(unsigned mask, std::uint64_t warp, std::uint64_t warps) const {
    namespace w = warpstore::detail::warp;
    if (flush_only) {
      if (warp == 0 && w::lane() == w::first_lane(mask)) statuses[0] = io.flush().raw;
      return;
    }
    const unsigned lanes = w::popcount(mask), rank = w::rank_in(mask, w::lane());
    for (std::uint64_t base = warp * lanes; base < count; base += warps * lanes) {
      const std::uint64_t i = base + rank;
      const bool active = i < count;
      io_request r{};
      if (active) r = io_request{requests[i].slba, requests[i].blocks, buffer + requests[i].offset};
      const nvme::status st = write ? io.write(mask, active, r) : io.read(mask, active, r);
      if (active) statuses[i] = st.raw;
    }
  }
};

// Runs the task to completion on this target (src/durable/log_io.cpp, built
// for the GPU by log_io.cu).
void run_block_io(const block_io_task& task);

}  // namespace detail

}  // namespace warpstore::durable
