// What an array's lines cost in storage, independent of the element type:
// the request that fills or writes back a line, and the write-back of every
// dirty line of one array (the first half of a flush).
#pragma once

#include <cstdint>

#include "warpstore/cache.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"
#include "warpstore/io.cuh"

namespace warpstore::detail {

struct line_io {
  cache_ref cache;
  io_ref io;
  error_record* errors;
  std::uint64_t first_block;  // logical block of the array's byte 0
  std::uint64_t end_block;    // one past the last block of the backing file
  std::uint64_t timeout_ns;
  std::uint32_t source;

  // The blocks of line `line` of this array, to or from cache slot `slot`.
  WARPSTORE_HD io_request request_for(std::uint64_t line, std::uint32_t slot) const {
    const std::uint32_t blocks_per_line = cache.line_size >> nvme::block_shift;
    const std::uint64_t slba = first_block + line * blocks_per_line;
    // Past the end of the file the request stays whole and the controller
    // refuses it (LBA out of range), as it would any bad command.
    const std::uint64_t left = slba < end_block ? end_block - slba : blocks_per_line;
    return {slba, static_cast<std::uint32_t>(left < blocks_per_line ? left : blocks_per_line),
            cache.line_data(slot)};
  }

  // Warp-collective: lanes of `mask` with `active` write back the line they
  // claimed (slot, key), then release it clean (or still dirty on failure,
  // recorded). The line may be any array's: its source says where it goes,
  // one source's controller at a time.
  WARPSTORE_HD bool write_back(unsigned mask, bool active, std::uint32_t slot,
                               std::uint64_t key) const {
    bool written = true;
    const std::uint32_t src = cache_ref::source_of(key);
    unsigned todo = warp::ballot(mask, active);
    while (todo) {
      const std::uint32_t s = warp::shfl(mask, src, warp::first_lane(todo));
      const bool mine = active && src == s;
      todo &= ~warp::ballot(mask, mine);
      const cache_source& where = cache.sources[s];
      const std::uint32_t blocks_per_line = cache.line_size >> nvme::block_shift;
      const std::uint64_t slba = where.first_block + cache_ref::line_of(key) * blocks_per_line;
      const std::uint64_t left = slba < where.end_block ? where.end_block - slba : blocks_per_line;
      const io_request req{
          slba, static_cast<std::uint32_t>(left < blocks_per_line ? left : blocks_per_line),
          cache.line_data(slot)};
      const nvme::status st = where.io.write(mask, mine, req);
      if (!mine) continue;
      cache.finish_write_back(slot, st.success());
      written = st.success();
      if (!st.success())
        errors->record_failed(s, st,
                       cache_ref::line_of(key), req.slba);
    }
    return written;
  }

  // Lines of one write-back cluster. A dirty line goes to storage together
  // with the dirty, idle lines of its aligned group of this many that the
  // cache holds, all claimed at once and sent by the warp in one batch, so
  // the controller receives neighbouring WRITEs together and can merge them
  // (the host controller's write thread: one pwritev). Evictions pick lines
  // from all over the cache one at a time; written alone, each would cost a
  // system call under the file's lock. The neighbours stay cached, clean.
  static constexpr std::uint32_t write_cluster_lines = 32;

  // What one lane writes at position `position` of the write-back cluster
  // of the line of key `k`, which the caller claimed in slot `s`: the
  // position of that line carries the claim; any other claims its own line
  // if the cache holds it dirty and idle (cache_ref::claim_dirty_key).
  struct cluster_pick {
    bool claimed = false;
    bool carries_own = false;
    std::uint32_t slot;
    std::uint64_t key;
  };
  WARPSTORE_HD cluster_pick pick_in_cluster(std::uint64_t k, std::uint32_t s,
                                            std::uint32_t position) const {
    cluster_pick p{false, false, s, k};
    if (position >= write_cluster_lines) return p;
    const std::uint64_t line = cache_ref::line_of(k);
    const std::uint64_t at = line - line % write_cluster_lines + position;
    p.carries_own = at == line;
    p.claimed = p.carries_own ||
                cache.claim_dirty_key(cache_ref::key(cache_ref::source_of(k), at), p.slot, p.key);
    return p;
  }

  // Warp-collective like write_back: lanes of `mask` with `active` each
  // write back the line they claimed (slot, key) together with its cluster.
  // Returns, per active lane, whether its own line was written; failures of
  // neighbours are recorded and leave them dirty.
  WARPSTORE_HD WARPSTORE_COLD bool write_back_clustered(unsigned mask, bool active,
                                                        std::uint32_t slot,
                                                        std::uint64_t key) const {
    const unsigned lanes = warp::popcount(mask);
    const unsigned rank = warp::rank_in(mask, warp::lane());
    bool own_written = true;
    unsigned todo = warp::ballot(mask, active);
    while (todo) {
      const unsigned src = warp::first_lane(todo);
      todo &= todo - 1;
      const std::uint64_t k = warp::shfl(mask, key, src);
      const std::uint32_t s = warp::shfl(mask, slot, src);
      // Each lane takes one position of the cluster at a time.
      for (std::uint32_t base = 0; base < write_cluster_lines; base += lanes) {
        const cluster_pick p = pick_in_cluster(k, s, base + rank);
        const bool written = write_back(mask, p.claimed, p.slot, p.key);
        if (warp::ballot(mask, p.carries_own && !written) != 0 && warp::lane() == src)
          own_written = false;
      }
    }
    return own_written;
  }

  // Warp-collective, the overlapped eviction of DESIGN.md: lane `ev` holds
  // slot `slot`, reclaimed (cache_ref::reclaim) from the dirty line `old_key`
  // of this array for a fill, with `fill` the READ of its new line into it
  // (`fill_active`: false when the new line is overwritten whole). The old
  // bytes go out with the dirty, idle lines of their cluster, and the READ
  // in the same trip (io_ref::write_then_read: the bytes leave the slot
  // before the READ lands). Returns, in lane `ev`, the old line's WRITE
  // status (`written`; a failure is recorded: its bytes are lost) and the
  // READ's (`filled`). Neighbours end clean, or dirty on failure (recorded).
  WARPSTORE_HD WARPSTORE_COLD void evict_and_fill(unsigned mask, unsigned ev, std::uint32_t slot,
                                                  std::uint64_t old_key, bool fill_active,
                                                  const io_request& fill, nvme::status& written,
                                                  nvme::status& filled) const {
    const unsigned lanes = warp::popcount(mask);
    const unsigned rank = warp::rank_in(mask, warp::lane());
    const std::uint64_t k = warp::shfl(mask, old_key, ev);
    const std::uint32_t s = warp::shfl(mask, slot, ev);
    written = nvme::status::ok();
    filled = nvme::status::ok();
    for (std::uint32_t base = 0; base < write_cluster_lines; base += lanes) {
      const cluster_pick p = pick_in_cluster(k, s, base + rank);
      const io_request w = request_for(cache_ref::line_of(p.key), p.slot);
      // The READ goes with the window that carries the old line.
      const bool own_here = warp::ballot(mask, p.carries_own) != 0;
      const bool reading = own_here && warp::lane() == ev && fill_active;
      nvme::status w_st, r_st;
      io.write_then_read(mask, p.claimed, w, w_st, reading, fill, r_st);
      if (p.claimed && !w_st.success())
        errors->record_failed(source, w_st,
                       cache_ref::line_of(p.key), w.slba);
      if (p.claimed && !p.carries_own) cache.finish_write_back(p.slot, w_st.success());
      if (!own_here) continue;
      const unsigned carrier = warp::first_lane(warp::ballot(mask, p.carries_own));
      const std::uint16_t raw = warp::shfl(mask, w_st.raw, carrier);
      if (warp::lane() == ev) {
        written = nvme::status{raw};
        filled = r_st;
      }
    }
  }

  // Warp-collective, after the warp wrote line `line` of this array (of
  // `lines` lines) whole: if that completed its cluster, every line of it
  // dirty and idle in the cache (lines past the array's end count as
  // there), writes the cluster back now. A streaming writer's output thus
  // reaches the controller in whole clusters while the kernel runs, and its
  // lines are clean by the time they are evicted. Returns false if a write
  // failed (recorded).
  WARPSTORE_HD bool write_back_if_whole(unsigned mask, std::uint64_t line,
                                        std::uint64_t lines) const {
    const unsigned lanes = warp::popcount(mask);
    const unsigned rank = warp::rank_in(mask, warp::lane());
    const std::uint64_t group = line - line % write_cluster_lines;
    for (std::uint32_t base = 0; base < write_cluster_lines; base += lanes) {
      const std::uint64_t at = group + base + rank;
      const bool ready = base + rank >= write_cluster_lines || at >= lines ||
                         cache_ref::idle_dirty(cache.state_of_key(cache_ref::key(source, at)));
      if (warp::ballot(mask, !ready) != 0) return true;  // not whole yet
    }
    const unsigned leader = warp::first_lane(mask);
    std::uint32_t slot = 0;
    std::uint64_t key = 0;
    const bool claimed =
        warp::lane() == leader && cache.claim_dirty_key(cache_ref::key(source, line), slot, key);
    const bool written = write_back_clustered(mask, claimed, slot, key);
    return warp::ballot(mask, claimed && !written) == 0;
  }

  // Warp-collective, the first pass of a flush: writes back the dirty lines
  // of this array among cache slots [first, first + n) a cluster at a time.
  // A dirty line found in a slot is written, with its cluster, only if no
  // line before it in its cluster is dirty in the cache: the lane that finds
  // a cluster's first dirty line takes the whole cluster, so each cluster
  // reaches the controller as one batch, however its lines are spread over
  // slots and warps. (Claiming every dirty slot first, as write_back_range
  // does, leaves the neighbours claimed by other warps: one line per batch.)
  // What it leaves (pinned lines, lines it raced past) is for
  // write_back_range, the second pass.
  WARPSTORE_HD void write_back_clusters(unsigned mask, std::uint32_t first, std::uint32_t n) const {
    const unsigned lanes = warp::popcount(mask);
    const unsigned rank = warp::rank_in(mask, warp::lane());
    for (std::uint32_t base = 0; base < n; base += lanes) {
      const std::uint32_t slot = first + base + rank;
      bool lead = false;
      std::uint64_t key = 0;
      if (base + rank < n) {
        const std::uint32_t s = cache.state_of(slot);
        const std::uint64_t k = cache.tag_of(slot);
        if ((s & (line_state::valid | line_state::dirty)) ==
                (line_state::valid | line_state::dirty) &&
            k != 0 && cache_ref::source_of(k) == source) {
          const std::uint64_t line = cache_ref::line_of(k);
          lead = true;
          for (std::uint64_t j = line - line % write_cluster_lines; lead && j < line; ++j)
            lead = (cache.state_of_key(cache_ref::key(source, j)) & line_state::dirty) == 0;
          lead = lead && cache.claim_dirty(slot, key);
        }
      }
      write_back_clustered(mask, lead, slot, key);
    }
  }

  // Warp-collective: writes back every dirty line of this array among cache
  // slots [first, first + n). A line being written back by someone else, or
  // pinned, is waited for (bounded): when this returns, every line that was
  // dirty when it started has reached the controller, unless an error was
  // recorded. Do not hold pins of this array while flushing.
  WARPSTORE_HD bool write_back_range(unsigned mask, std::uint32_t first, std::uint32_t n) const {
    const unsigned lanes = warp::popcount(mask);
    const unsigned rank = warp::rank_in(mask, warp::lane());
    bool ok = true;
    for (std::uint32_t base = 0; base < n; base += lanes) {
      const std::uint32_t slot = first + base + rank;
      bool pending = base + rank < n;
      deadline dl(timeout_ns);
      while (warp::ballot(mask, pending) != 0) {
        std::uint64_t key = 0;
        bool claimed = false;
        if (pending) {
          const std::uint32_t s = cache.state_of(slot);
          const bool mine = cache_ref::source_of(cache.tag_of(slot)) == source;
          if ((s & line_state::dirty) == 0 || !mine) {
            pending = false;  // clean, or another array's
          } else {
            claimed = cache.claim_dirty(slot, key);
          }
        }
        write_back_clustered(mask, claimed, slot, key);
        if (claimed) pending = false;
        if (pending && dl.expired()) {
          pending = false;
          ok = false;
          errors->record(error_kind::deadline, source, nvme::status::deadline(), 0, 0);
        } else if (pending) {
          dl.pause();
        }
      }
    }
    return warp::ballot(mask, !ok) == 0;
  }

  // One lane: a FLUSH through the queues; records a failure.
  WARPSTORE_HD bool flush_controller() const {
    const nvme::status st = io.flush();
    if (st.success()) return true;
    errors->record_failed(source, st, 0, 0);
    return false;
  }
};

// Host side of a flush, per target (src/array/flush.cpp, built for the GPU by
// flush.cu): writes back every dirty line of `lines`' array across the whole
// cache (clusters first, then what is left), then one FLUSH; returns when all
// is done. Errors go to lines.errors.
void flush_lines(const line_io& lines);

}  // namespace warpstore::detail
