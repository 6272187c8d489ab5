// Asynchronous batches of array_ref<T>: prefetch and post_write_back post a
// window of commands, wait collects them, release gives the pins back.
// Part of detail/array_ref.cuh.
#pragma once

#include <cstdint>

#include "warpstore/batch.cuh"
#include "warpstore/cache.cuh"
#include "warpstore/detail/array_ref.cuh"
#include "warpstore/detail/line_io.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"
#include "warpstore/io.cuh"

namespace warpstore {

template <class T>
WARPSTORE_HD batch_ticket array_ref<T>::prefetch(std::uint64_t first, std::uint64_t n,
                                                 bool pin) const {
  return post_batch(first, n, pin ? std::uint8_t{batch_ticket::pin} : std::uint8_t{0});
}

template <class T>
WARPSTORE_HD batch_ticket array_ref<T>::post_write_back(std::uint64_t first,
                                                        std::uint64_t n) const {
  if (!writable) {
    batch_ticket t;
    t.flags = batch_ticket::write | batch_ticket::failed;
    const unsigned mask = calling_mask();
    t.mask = mask;
    if (detail::warp::rank_in(mask, detail::warp::lane()) == 0) check_writable(first);
    return t;
  }
  return post_batch(first, n, batch_ticket::write);
}

template <class T>
WARPSTORE_HD bool array_ref<T>::wait(batch_ticket& t) const {
  const unsigned mask = batch_mask(t);
  if (detail::warp::ballot(mask, t.in_flight()) != 0) {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    complete_part(t, mask, lanes, rank);
  }
  const bool ok = detail::warp::ballot(mask, t.has_failed()) == 0;
  // Each lane pinned its own deferred lines in complete_part; the caller's
  // lanes then read all of them. A warp barrier orders each lane's pin (the
  // acquire that saw the line published) before the other lanes' reads, as
  // batch_mask's does for the lines pinned when posting (a ballot does not
  // order memory), and the lanes leave together (see leave_together).
  leave_together(mask);
  return ok;
}

template <class T>
WARPSTORE_HD void array_ref<T>::release(batch_ticket& t) const {
  wait(t);
  const unsigned mask = batch_mask(t);
  if (detail::warp::ballot(mask, (t.flags & batch_ticket::pinned) != 0) == 0) return;
  const unsigned lanes = detail::warp::popcount(mask);
  const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
  detail::warp::sync(mask);  // every lane's reads are done before the unpin
  unpin_lines(t.first_line, t.end_line, lanes, rank);
  t.flags &= static_cast<std::uint8_t>(~batch_ticket::pinned);
  leave_together(mask);  // unpin_lines' trips differ between lanes
}

template <class T>
WARPSTORE_HD batch_ticket array_ref<T>::post_batch(std::uint64_t first, std::uint64_t n,
                                                   std::uint8_t kind) const {
  const unsigned mask = calling_mask();
  batch_ticket t = post_parts(mask, first, n, kind);
  leave_together(mask);
  return t;
}

template <class T>
WARPSTORE_HD batch_ticket array_ref<T>::post_parts(unsigned mask, std::uint64_t first,
                                                   std::uint64_t n, std::uint8_t kind) const {
  const unsigned lanes = detail::warp::popcount(mask);
  const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
  batch_ticket t;
  t.mask = mask;
  t.flags = kind;
  t.first = first;
  if (!check_span(first, n, rank)) {
    t.flags |= batch_ticket::failed;
    return t;
  }
  if (n == 0) return t;
  if ((kind & batch_ticket::pin) != 0) t.flags |= batch_ticket::pinned;  // until a failure
  t.first_line = line_of(first);
  t.end_line = line_of(first + n - 1) + 1;
  std::uint32_t part = lanes * batch_ticket::rounds;
  if (io.kind == io_kind::queues) {
    t.pair = io.pair_index();
    const std::uint32_t cap = io.pair(t.pair).depth / 2;  // a window never fills a ring
    part = part < cap ? part : cap;
  }
  t.chunk_lines = part;
  t.chunk_line = t.first_line;
  for (;;) {
    post_part(t, mask, lanes, rank);
    const std::uint64_t end = t.chunk_line + t.chunk_lines;
    if (end >= t.end_line) break;
    complete_part(t, mask, lanes, rank);
    if (detail::warp::ballot(mask, t.has_failed()) != 0) break;
    t.chunk_line = end;
  }
  return t;
}

template <class T>
WARPSTORE_HD typename array_ref<T>::busy_round array_ref<T>::round_of(
    const batch_ticket& t, std::uint32_t r, unsigned mask, unsigned lanes, unsigned rank,
    const detail::line_io& l, std::uint32_t& offset) const {
  busy_round b;
  b.active = ((t.busy >> r) & 1u) != 0;
  b.busy_lanes = detail::warp::ballot(mask, b.active);
  b.line = t.chunk_line + r * lanes + rank;
  b.req = l.request_for(b.line, t.slots[r]);
  b.ticket = t.window + offset + detail::warp::rank_in(b.busy_lanes, detail::warp::lane());
  offset += detail::warp::popcount(b.busy_lanes);
  return b;
}

template <class T>
WARPSTORE_HD void array_ref<T>::post_part(batch_ticket& t, unsigned mask, unsigned lanes,
                                          unsigned rank) const {
  const detail::line_io l = lines();
  const bool write = (t.flags & batch_ticket::write) != 0;
  const bool pin = (t.flags & batch_ticket::pin) != 0;
  t.busy = t.deferred = t.held = 0;
  // Claim. No queue slot is held yet: a dirty victim's write-back may
  // take some.
  for (std::uint32_t r = 0; r < batch_ticket::rounds; ++r) {
    if (r * lanes >= t.chunk_lines) break;  // same in every lane
    const std::uint32_t pos = r * lanes + rank;
    const std::uint64_t line = t.chunk_line + pos;
    const bool want = pos < t.chunk_lines && line < t.end_line;
    const std::uint64_t k = cache_ref::key(source, line);
    const std::uint8_t bit = static_cast<std::uint8_t>(1u << r);
    if (write) {
      std::uint64_t old_key = 0;
      if (want && cache.claim_dirty_key(k, t.slots[r], old_key)) t.busy |= bit;
      continue;
    }
    acquire_result a{0, acquire_kind::retry};
    if (want) a = cache.acquire(k, 1);
    // As with_line: a line whose eviction is still being written is not
    // read yet.
    if (a.kind == acquire_kind::fill && cache.eviction_pending(k)) {
      cache.cancel_fill(a.slot, 1);
      a.kind = acquire_kind::retry;
    }
    const bool writing_back = a.kind == acquire_kind::write_back;
    if (want) {
      t.slots[r] = a.slot;
      if (a.kind == acquire_kind::fill) {
        t.busy |= bit;
        t.held |= bit;
      } else if (a.kind == acquire_kind::hit) {
        if (pin)
          t.held |= bit;
        else
          cache.release(a.slot, 1);
      } else {
        t.deferred |= bit;
      }
    }
    if (detail::warp::ballot(mask, writing_back) != 0)
      l.write_back_clustered(mask, writing_back, a.slot, a.old_key);
  }
  const bool queued = io.kind == io_kind::queues;
  std::uint32_t total = 0;
  if (queued)
    for (std::uint32_t r = 0; r < batch_ticket::rounds; ++r)
      total += detail::warp::popcount(detail::warp::ballot(mask, ((t.busy >> r) & 1u) != 0));
  if (total != 0) t.window = io_ref::take_window(io.pair(t.pair), mask, total);
  // Post (queues) or execute (memory controller) round by round.
  std::uint32_t offset = 0;
  for (std::uint32_t r = 0; r < batch_ticket::rounds && r * lanes < t.chunk_lines; ++r) {
    const busy_round b = round_of(t, r, mask, lanes, rank, l, offset);
    if (b.busy_lanes == 0) continue;
    nvme::status st;
    if (queued) {
      const queue_pair_ref& qp = io.pair(t.pair);
      st = write ? io_ref::post_write(qp, mask, b.active, b.req, b.ticket)
                 : io_ref::post_read(qp, b.active, b.req, b.ticket);
      if (b.active && !st.success()) finish_line(t, r, b.line, b.req, st);  // never posted
    } else {
      st = write ? io.write(mask, b.active, b.req) : io.read(mask, b.active, b.req);
      if (b.active) finish_line(t, r, b.line, b.req, st);
    }
  }
  // Ring the doorbell now: posted entries reach the controller only when
  // somebody moves the tail, and otherwise nobody would before this
  // warp's wait(), so the reads would not run while the warp computes.
  if (queued && total != 0) {
    detail::warp::sync(mask);
    if (detail::warp::lane() == detail::warp::first_lane(mask)) io.pair(t.pair).move_tail();
  }
  if (detail::warp::ballot(mask, t.busy != 0 || t.deferred != 0) != 0)
    t.flags |= batch_ticket::pending;
}

template <class T>
WARPSTORE_HD void array_ref<T>::finish_line(batch_ticket& t, std::uint32_t r, std::uint64_t line,
                                            const io_request& req, nvme::status st) const {
  const std::uint8_t bit = static_cast<std::uint8_t>(1u << r);
  const std::uint32_t slot = t.slots[r];
  t.busy &= static_cast<std::uint8_t>(~bit);
  if ((t.flags & batch_ticket::write) != 0) {
    cache.finish_write_back(slot, st.success());
    if (!st.success()) {
      errors->record_failed(source, st, element_of_line(t, line), req.slba);
      t.flags |= batch_ticket::failed;
    }
    return;
  }
  if (st.success()) {
    cache.publish(slot, req.blocks << nvme::block_shift);
    if ((t.flags & batch_ticket::pin) == 0) {
      cache.release(slot, 1);
      t.held &= static_cast<std::uint8_t>(~bit);
    }
    return;
  }
  cache.abandon(slot);
  errors->record_failed(source, st, element_of_line(t, line), req.slba);
  cache.release(slot, 1);
  t.held &= static_cast<std::uint8_t>(~bit);
  t.flags |= batch_ticket::failed;
}

template <class T>
WARPSTORE_HD void array_ref<T>::complete_part(batch_ticket& t, unsigned mask, unsigned lanes,
                                              unsigned rank) const {
  const detail::line_io l = lines();
  const bool write = (t.flags & batch_ticket::write) != 0;
  const bool pin = (t.flags & batch_ticket::pin) != 0;
  if (io.kind == io_kind::queues) {
    const queue_pair_ref& qp = io.pair(t.pair);
    std::uint32_t offset = 0;
    for (std::uint32_t r = 0; r < batch_ticket::rounds && r * lanes < t.chunk_lines; ++r) {
      const busy_round b = round_of(t, r, mask, lanes, rank, l, offset);
      if (b.busy_lanes == 0) continue;
      const nvme::status st =
          write ? io_ref::complete_write(qp, b.active, b.ticket, nvme::status::ok())
                : io_ref::complete_reads(qp, mask, b.active, b.req, b.ticket, nvme::status::ok());
      if (b.active) finish_line(t, r, b.line, b.req, st);
    }
  }
  for (std::uint32_t r = 0; r < batch_ticket::rounds; ++r) {
    if (r * lanes >= t.chunk_lines) break;
    const std::uint8_t bit = static_cast<std::uint8_t>(1u << r);
    const bool active = (t.deferred & bit) != 0;
    if (detail::warp::ballot(mask, active) == 0) continue;
    const std::uint64_t line = t.chunk_line + r * lanes + rank;
    const detail::line_grant g =
        with_line<true>(mask, active, line, element_of_line(t, line), [](std::uint32_t) {});
    if (!active) continue;
    if (g.ok && pin) {
      t.slots[r] = g.slot;
      t.held |= bit;
    } else if (g.pins != 0) {
      cache.release(g.slot, g.pins);
    }
    if (!g.ok) t.flags |= batch_ticket::failed;
  }
  t.busy = t.deferred = 0;
  t.flags &= static_cast<std::uint8_t>(~batch_ticket::pending);
  // A failed batch holds no pins: give back this part's and the earlier
  // parts' (every line of those is pinned once).
  if (detail::warp::ballot(mask, t.has_failed()) != 0) {
    t.flags |= batch_ticket::failed;
    t.flags &= static_cast<std::uint8_t>(~batch_ticket::pinned);
    if (pin) {
      for (std::uint32_t r = 0; r < batch_ticket::rounds; ++r)
        if ((t.held >> r) & 1u) cache.release(t.slots[r], 1);
      unpin_lines(t.first_line, t.chunk_line, lanes, rank);
    }
    t.held = 0;
  }
}

}  // namespace warpstore
