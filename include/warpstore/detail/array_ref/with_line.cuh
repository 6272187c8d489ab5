// array_ref<T>::with_line: the path every element access takes (coalesce,
// probe, claim, fill, publish). Part of detail/array_ref.cuh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "warpstore/cache.cuh"
#include "warpstore/detail/array_ref.cuh"
#include "warpstore/detail/line_io.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"
#include "warpstore/io.cuh"

namespace warpstore {

template <class T>
template <bool Keep, bool Write, class Use, class Around>
WARPSTORE_HD detail::line_grant array_ref<T>::with_line(unsigned mask, bool want,
                                                        std::uint64_t line, std::uint64_t index,
                                                        Use&& use, bool overwrite,
                                                        Around&& around) const {
  constexpr bool may_read_around = !std::is_same_v<std::decay_t<Around>, std::nullptr_t>;
  static_assert(!may_read_around || (!Keep && !Write), "only plain reads read around");
  const bool around_here = may_read_around && reads_around();
  const detail::line_io l = lines();
  detail::line_grant g;
  bool pending = want;
  detail::deadline dl(timeout_ns);
  std::uint32_t round = 0;
  std::uint32_t waits = 0;  // retries that waited for a line, not for a set's lock
  // Whether this lane waits with priority in its line's set
  // (cache_ref::begin_urgent): from when its deadline is overdue until it is
  // served or gives up. A flag, not the set (set_of(k) again at the end):
  // the row kernels run short of registers.
  bool claimed = false;
  while (detail::warp::ballot(mask, pending) != 0) {
    const std::uint64_t k = pending ? cache_ref::key(source, line) : 0;
    const unsigned group = detail::warp::match_any(mask, k);
    const unsigned leader = detail::warp::first_lane(group);
    const bool is_leader = pending && detail::warp::lane() == leader;
    const bool urgent =
        (detail::warp::ballot(mask, pending && claimed) & group) != 0;
    acquire_result r{0, acquire_kind::retry};
    if (is_leader) r = cache.acquire(k, detail::warp::popcount(group), urgent);
    // A line whose eviction is still being written is not read yet: the
    // file does not hold its bytes until that WRITE completes.
    if (is_leader && r.kind == acquire_kind::fill && cache.eviction_pending(k)) {
      cache.cancel_fill(r.slot, detail::warp::popcount(group));
      r.kind = acquire_kind::retry;
    }
    bool filling = is_leader && r.kind == acquire_kind::fill;
    const bool skip_read = Write && overwrite;
    io_request req = l.request_for(line, r.slot);
    nvme::status st = io.read(mask, filling && !skip_read, req);
    // Readers too: a set full of dirty lines makes room by writing one back.
    bool writing_back = is_leader && r.kind == acquire_kind::write_back;
    const bool wrote_back = detail::warp::ballot(mask, writing_back) != 0;
    // A write-back that failed (recorded by write_back) fails the access
    // that needed the room: the line stays dirty, and retrying would only
    // fail again until the deadline (a device gone, a power cut).
    bool written_back = true;
    if (wrote_back && overlapped_eviction) {
      // One leader whose dirty victim is a line of this array takes the
      // slot for its own line at once: the old bytes go out and the new
      // line comes in, in one trip (line_io::evict_and_fill).
      const unsigned ev_lanes =
          detail::warp::ballot(mask, writing_back && cache_ref::source_of(r.old_key) == source);
      if (ev_lanes != 0) {
        const unsigned ev = detail::warp::first_lane(ev_lanes);
        bool evicting = false;
        if (detail::warp::lane() == ev) {
          evicting = cache.reclaim(r.slot, r.old_key, k, detail::warp::popcount(group), dl);
          writing_back = false;  // reclaimed, or given back dirty to retry
        }
        if (detail::warp::shfl(mask, evicting, ev)) {
          if (evicting) req = l.request_for(line, r.slot);  // lane ev's READ
          nvme::status written, filled;
          l.evict_and_fill(mask, ev, r.slot, r.old_key, !skip_read, req, written, filled);
          if (evicting) {
            cache.end_eviction(r.old_key, written.success());
            r.kind = acquire_kind::fill;
            filling = true;
            st = filled;
          }
        }
      }
    }
    if (filling && !st.success()) {  // a plain fill's READ, or an eviction's
      cache.abandon(r.slot);
      errors->record_failed(source, st, index, req.slba);
    }
    if (detail::warp::ballot(mask, writing_back) != 0)
      written_back = l.write_back_clustered(mask, writing_back, r.slot, r.old_key);
    // Read around rather than wait (see the declaration): the line's bytes
    // in host memory, if the file holds them.
    const bool reading_around =
        around_here && is_leader && r.kind == acquire_kind::retry &&
        memory_source_ref::check_range(req, io.memory.capacity_blocks).success();
    if (reading_around) cache.count(&cache_counters::read_around);
    // 0: retry (or wrote a line back), 1: line pinned, 2: fill failed
    // (pins held, no data), 3: write-back failed (no pins), 4: read around
    const bool granted = r.kind == acquire_kind::hit || r.kind == acquire_kind::fill;
    const std::uint32_t outcome = !is_leader       ? 0u
                                  : reading_around ? 4u
                                  : granted        ? (st.success() ? 1u : 2u)
                                                   : (written_back ? 0u : 3u);
    const std::uint32_t got = detail::warp::shfl(mask, outcome, leader);
    const bool contended = detail::warp::shfl(mask, is_leader && r.contended, leader);
    const std::uint32_t slot = detail::warp::shfl(mask, r.slot, leader);
    if constexpr (may_read_around) {
      if (pending && got == 4) {  // the group's line, the same in every lane of it
        pending = false;
        g.ok = true;
        around(io.memory.data + (l.request_for(line, 0).slba << nvme::block_shift));
      }
    }
    if (pending && got != 0) {
      pending = false;
      g.slot = slot;
      g.ok = got == 1;
      g.pins = is_leader && got != 3 ? detail::warp::popcount(group) : 0;
      if (g.ok) use(slot);
    }
    // A filled line is published once its group used it: a writer's bytes
    // are in it before any other warp can read it.
    if constexpr (Write) detail::warp::sync(mask);  // every writer of each group is done
    if (filling && st.success())
      cache.publish(r.slot, skip_read ? 0u : req.blocks << nvme::block_shift, Write);
    else if (Write && is_leader && r.kind == acquire_kind::hit)
      cache.mark_dirty(r.slot);
    if constexpr (!Keep) {
      detail::warp::sync(mask);  // every reader of each group is done before the unpin
      if (g.pins != 0) cache.release(g.slot, g.pins);
      g.pins = 0;
    }
    const unsigned waiting = detail::warp::ballot(mask, pending);
    if (round == 0 && waiting != 0 && detail::warp::lane() == detail::warp::first_lane(waiting))
      cache.count(&cache_counters::retries, detail::warp::popcount(waiting));
    ++round;
    if (pending) {
      // No line or victim for this long, while the set stood still: stuck.
      // A set that keeps moving (other lanes' fills and releases) is a
      // cache smaller than the launch's lines: slow, not stuck, until the
      // last extension (then starved: others took every line freed).
      if (dl.expired_unless_moving([&] { return cache.set_digest(k); })) {
        pending = false;
        errors->record(error_kind::deadline, source,
                       cache.set_all_pinned(k) ? nvme::status::no_victim()
                       : dl.capped()           ? nvme::status::starved()
                                               : nvme::status::deadline(),
                       index, l.request_for(line, 0).slba);
      } else if (!claimed && dl.overdue()) {
        claimed = true;
        cache.begin_urgent(cache.set_of(k));
      } else if (contended) {
        // The set's lock is held for one scan, never across I/O: look again
        // shortly, at the same pace however long the queue for the set.
        // Backing off exponentially here made the lanes of a launch that
        // misses everywhere (each set wanted by eight warps at once) sleep
        // 32 us at a time for a lock held a microsecond: a 1 K-row gather
        // through a full cache took 540 us of GPU time (7 warps in 8 found
        // their set locked at first; H200, bench/python_latency.py --misses).
        detail::backoff(cache_ref::contended_backoff_ns);
      } else if (!wrote_back) {
        // Exponential backoff: when more lines are wanted at once than the
        // cache holds, waiting lanes must leave the memory system to the
        // fills that free lines. A warp that just made room looks again
        // at once; one waiting with priority every microsecond at most
        // (newcomers leave the set's victims to it).
        const std::uint32_t most = urgent ? 4u : 9u;
        detail::backoff(64u << (waits < most ? waits : most));
        ++waits;
      }
    }
    if (!pending && claimed) {  // served, or gave up (k is still its key)
      cache.end_urgent(cache.set_of(k));
      claimed = false;
    }
  }
  return g;
}

}  // namespace warpstore
