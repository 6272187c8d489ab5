// Device view of a storage-backed array: how one element read or write
// travels from a kernel thread through warp coalescing, the cache, and on a
// miss the controller. See array.cuh for the owning host object.
#pragma once

#include <cstdint>
#include <type_traits>

#include "warpstore/batch.cuh"
#include "warpstore/cache.cuh"
#include "warpstore/detail/line_io.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"
#include "warpstore/io.cuh"

namespace warpstore {

// A cache line a lane holds pinned: reads through it cost no atomics. Each
// lane owns one pin and gives it back with release().
template <class T>
struct pinned_line {
  const T* data = nullptr;   // element `first` of the array
  std::uint64_t first = 0;   // first element index in the line
  std::uint32_t count = 0;   // elements in the line
  std::uint32_t* state = nullptr;

  WARPSTORE_HD bool valid() const { return data != nullptr; }
  WARPSTORE_HD bool contains(std::uint64_t i) const { return i - first < count; }
  WARPSTORE_HD const T& operator[](std::uint64_t i) const { return data[i - first]; }
  WARPSTORE_HD void release() {
    if (state != nullptr)
      detail::device_atomic<std::uint32_t>(*state).fetch_sub(1, detail::memory_order_release);
    data = nullptr;
    state = nullptr;
  }
  // Warp-collective release for lanes of `mask` that pinned the same line
  // together (a warp walking one line): one atomic instead of one per lane.
  WARPSTORE_HD void release_together(unsigned mask) {
    detail::warp::sync(mask);  // every lane's reads are done before the unpin
    const bool valid_here = state != nullptr;
    const unsigned holders = detail::warp::ballot(mask, valid_here);
    if (valid_here && detail::warp::lane() == detail::warp::first_lane(holders))
      detail::device_atomic<std::uint32_t>(*state).fetch_sub(detail::warp::popcount(holders),
                                                             detail::memory_order_release);
    data = nullptr;
    state = nullptr;
  }
};

namespace detail {

// What a lane got from with_line.
struct line_grant {
  std::uint32_t slot = 0;
  std::uint32_t pins = 0;  // pins this lane must give back (group leader)
  bool ok = false;
};

}  // namespace detail

template <class T>
struct array_ref {
  static_assert(std::is_trivially_copyable_v<T>, "array elements must be trivially copyable");

  cache_ref cache;
  io_ref io;
  error_record* errors;
  std::uint64_t count;        // elements
  std::uint64_t first_block;  // logical block of element 0 (byte offset / 512)
  std::uint64_t end_block;    // one past the last block of the backing file
  std::uint64_t timeout_ns;
  std::uint32_t source;       // id in this cache's keys
  std::uint32_t elems_per_line_log2;
  bool bounds_check;
  bool writable;              // the backing file was opened read-write
  bool eager_write_back;      // options::eager_write_back
  bool overlapped_eviction;   // options::overlapped_eviction

  WARPSTORE_HD std::uint64_t size() const { return count; }

  // Reads element i. Any subset of a warp's lanes may call together, on
  // this array or others (each array's lanes work as their own group, see
  // calling_mask); lanes asking for the same line share one lookup and fill.
  WARPSTORE_HD T operator[](std::uint64_t i) const {
    const unsigned mask = calling_mask();
    const bool in_range = check_index(i);
    T v{};
    with_line<false>(mask, in_range, line_of(i), i,
                     [&](std::uint32_t slot) { v = *element_in(slot, i); });
    return v;
  }

  // Masked read, for callers that know which lanes call together: every
  // lane of `mask` calls (converged or not: the collectives inside sync on
  // `mask`, not on __activemask()); lanes with `want` get element i, the
  // others get T{} and take part only in the warp's collectives (their i is
  // ignored, never checked). Same protocol as operator[].
  WARPSTORE_HD T read_masked(unsigned mask, bool want, std::uint64_t i) const {
    const bool in_range = want && check_index(i);
    T v{};
    with_line<false>(mask, in_range, line_of(i), i,
                     [&](std::uint32_t slot) { v = *element_in(slot, i); });
    return v;
  }

  // Pins the line holding element i for this lane (collective over the
  // calling lanes, like operator[]). Returns an invalid line on error.
  //
  // Lanes that got their line keep it pinned while the warp's other lanes
  // wait for theirs, so a launch whose warps pin more lines at once than the
  // cache holds can wait until the deadline: size the cache for the pins held
  // together (operator[] and read_span hold nothing while they wait).
  WARPSTORE_HD pinned_line<T> pin(std::uint64_t i) const {
    const unsigned mask = calling_mask();
    const bool in_range = check_index(i);
    const std::uint64_t line = line_of(i);
    const detail::line_grant g = with_line<true>(mask, in_range, line, i, [](std::uint32_t) {});
    pinned_line<T> p;
    if (g.ok) {
      p.first = line << elems_per_line_log2;
      p.count = static_cast<std::uint32_t>(
          count - p.first < (1ull << elems_per_line_log2) ? count - p.first
                                                          : (1ull << elems_per_line_log2));
      p.data = reinterpret_cast<const T*>(cache.line_data(g.slot));
      p.state = cache.states + g.slot;
    }
    // The leader took one pin per lane of its group; each lane gives its own
    // back. A failed fill hands nothing out, so the leader returns them all.
    if (!g.ok && g.pins != 0) cache.release(g.slot, g.pins);
    return p;
  }

  // Warp-collective: every calling lane passes the same `first` and `n`;
  // together they copy elements [first, first + n) to out[0..n). `out` must
  // be memory all calling lanes can address (global or shared).
  WARPSTORE_HD bool read_span(std::uint64_t first, std::uint64_t n, T* out) const {
    const unsigned mask = calling_mask();
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    bool all_ok = true;
    if (!check_span(first, n, rank)) return false;
    std::uint64_t done = 0;
    while (done < n) {
      const std::uint64_t i = first + done;
      const std::uint64_t line = line_of(i);
      const std::uint64_t line_end = (line + 1) << elems_per_line_log2;
      const std::uint64_t take = (line_end - i < n - done) ? line_end - i : n - done;
      const detail::line_grant g = with_line<false>(mask, true, line, i, [&](std::uint32_t slot) {
        const T* src = element_in(slot, i);
        for (std::uint64_t k = rank; k < take; k += lanes) out[done + k] = src[k];
      });
      all_ok = all_ok && g.ok;
      done += take;
    }
    return all_ok;
  }

  // Writes element i (collective over the calling lanes, like operator[]).
  // The line is read first unless present (read-modify-write), then written
  // in the cache and marked dirty; it reaches storage when evicted or
  // flushed. Lanes writing the same element: one of them wins.
  WARPSTORE_HD void store(std::uint64_t i, const T& v) const {
    const unsigned mask = calling_mask();
    if (!check_writable(i)) return;
    const bool in_range = check_index(i);
    with_line<false, true>(mask, in_range, line_of(i), i,
                           [&](std::uint32_t slot) { *element_in(slot, i) = v; });
  }

  // Warp-collective like read_span: copies in[0..n) to elements
  // [first, first + n). Lines the span covers whole are not read first.
  WARPSTORE_HD bool write_span(std::uint64_t first, std::uint64_t n, const T* in) const {
    const unsigned mask = calling_mask();
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    if (!writable) return rank == 0 ? check_writable(first) : false;
    if (!check_span(first, n, rank)) return false;
    bool all_ok = true;
    std::uint64_t done = 0;
    const std::uint64_t per_line = 1ull << elems_per_line_log2;
    while (done < n) {
      const std::uint64_t i = first + done;
      const std::uint64_t line = line_of(i);
      const std::uint64_t line_end = (line + 1) << elems_per_line_log2;
      const std::uint64_t take = (line_end - i < n - done) ? line_end - i : n - done;
      const detail::line_grant g = with_line<false, true>(
          mask, true, line, i,
          [&](std::uint32_t slot) {
            T* dst = element_in(slot, i);
            for (std::uint64_t k = rank; k < take; k += lanes) dst[k] = in[done + k];
          },
          take == per_line);
      all_ok = all_ok && g.ok;
      // Every lane had the same line: g.ok is the warp's.
      if (eager_write_back && take == per_line && g.ok)
        all_ok = lines().write_back_if_whole(mask, line, line_of(count - 1) + 1) && all_ok;
      done += take;
    }
    return all_ok;
  }

  // Device-initiated flush, warp-collective (call it from one warp, after
  // the writes it must cover are done, holding no pins of this array):
  // writes back every dirty line of this array and sends one FLUSH. Returns
  // true when all of it succeeded; failures are recorded for check(). With
  // the memory controller the writes end in pinned host memory, not in the
  // file: the host's flush() takes them there.
  WARPSTORE_HD bool flush() const {
    const unsigned mask = calling_mask();
    const detail::line_io l = lines();
    l.write_back_clusters(mask, 0, cache.num_lines);
    bool ok = l.write_back_range(mask, 0, cache.num_lines);
    const unsigned leader = detail::warp::first_lane(mask);
    bool flushed = true;
    if (detail::warp::lane() == leader) flushed = l.flush_controller();
    flushed = detail::warp::shfl(mask, flushed ? 1u : 0u, leader) != 0;
    return ok && flushed;
  }

  // Asynchronous batches (batch.cuh). Warp-collective like read_span: every
  // calling lane passes the same `first` and `n`, and the same lanes later
  // pass their own copies of the ticket to wait() (and release()). The
  // ticket remembers those lanes: wait and release reconverge them
  // (__syncwarp over the posting mask), so the warp may reach them diverged.
  //
  // prefetch posts reads of the lines holding elements [first, first + n)
  // and returns without waiting for them: a line the cache holds is a hit
  // (pinned if `pin`), a line it lacks is claimed (the cache's fill: busy,
  // with this warp as filler) and its READ is posted to the controller; a
  // line another warp is filling, or one for which no victim was free, is
  // left to wait(), which looks it up the ordinary way. A victim that was
  // dirty is written back during the post, as a miss would. wait() collects
  // the READs (polls their completions, copies staged bytes, publishes the
  // lines valid), then looks up the deferred lines, and returns true when
  // every line is in the cache. A failed READ is recorded exactly as a
  // failed miss is (element index, LBA, status; array::check() raises it),
  // its line is given up, and wait() returns false; an out-of-range span is
  // recorded at the post and wait() returns false. Every wait is bounded by
  // the array's deadline.
  //
  // Guarantee after a successful wait: with `pin`, every line of the span is
  // in the cache and stays there (pinned: not evicted, not refilled) until
  // release(t); reads of it are hits. Without `pin`, every line was
  // published in the cache when wait returned, and reads hit unless the
  // line was evicted since (a cache sized for the working set keeps it).
  // Pins count against the cache like pin(): size it for the batches held
  // at once.
  //
  // In flight (between prefetch and wait) the warp holds its lines busy and
  // a window of queue slots (up to half the queue pair's depth). Meanwhile
  // its lanes must not read or write through this cache lines of the batch
  // itself (they are not there yet: such a read waits until the deadline)
  // nor take other queue slots of the same controller (a miss, a flush,
  // another post): the slots they would wait for may be the ones the batch
  // holds. Compute on what is already pinned, in shared or global memory,
  // then wait. One batch in flight per warp; other warps reading the
  // batch's lines wait for them as for any fill in flight.
  //
  // Queue slots are reused in ticket order: a posted window keeps its
  // slots until its warp waits, and once the pair's tickets wrap around to
  // them the next claimer blocks holding an unposted ticket, so no command
  // after it reaches the controller until this warp waits. Harmless for a
  // warp that goes on to wait; a deadlock (until the deadline) where warps
  // are coupled by __syncthreads and each holds a window while a
  // block-mate posts or waits: the block-mate's commands sit behind the
  // blocked ticket while this warp waits at the barrier. Warps coupled by a
  // barrier hold one batch in flight between them (one loader warp per
  // block; CPU tests DoubleBufferedTiles*).
  //
  // A span longer than one part (32 * batch_ticket::rounds lines for a
  // warp, rounds lines for a CPU thread, at most half the queue depth)
  // completes all its parts but the last inside prefetch.
  WARPSTORE_HD batch_ticket prefetch(std::uint64_t first, std::uint64_t n, bool pin = false) const {
    return post_batch(first, n, pin ? std::uint8_t{batch_ticket::pin} : std::uint8_t{0});
  }

  // Posts write-back of the dirty lines among those holding elements
  // [first, first + n) without waiting (warp-collective like prefetch): each
  // dirty, idle line is claimed busy (readers wait for it), its WRITE posted
  // (bytes copied to staging by the warp). wait(t) collects the WRITEs and
  // marks the lines clean (still dirty on failure, recorded). Lines pinned
  // or busy when it looks are left for a later flush. Not durable until a
  // flush. Same rules in flight as prefetch.
  WARPSTORE_HD batch_ticket post_write_back(std::uint64_t first, std::uint64_t n) const {
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

  // Completes the batch of `t` (see prefetch); warp-uniform result. Waiting
  // again is a no-op that returns the same answer.
  WARPSTORE_HD bool wait(batch_ticket& t) const {
    const unsigned mask = batch_mask(t);
    if (detail::warp::ballot(mask, t.in_flight()) != 0) {
      const unsigned lanes = detail::warp::popcount(mask);
      const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
      complete_part(t, mask, lanes, rank);
    }
    return detail::warp::ballot(mask, t.has_failed()) == 0;
  }

  // Gives back the pins of a waited batch posted with `pin` (waits first if
  // it was not). A failed batch holds none. Warp-collective like wait.
  WARPSTORE_HD void release(batch_ticket& t) const {
    wait(t);
    const unsigned mask = batch_mask(t);
    if (detail::warp::ballot(mask, (t.flags & batch_ticket::pinned) != 0) == 0) return;
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    detail::warp::sync(mask);  // every lane's reads are done before the unpin
    unpin_lines(t.first_line, t.end_line, lanes, rank);
    t.flags &= static_cast<std::uint8_t>(~batch_ticket::pinned);
  }

  // The address of element i in the cache, for a lane whose warp holds a pin
  // on its line (a waited batch posted with `pin`, or pin()): a tag lookup,
  // no atomics. nullptr when the cache does not hold the line (then the
  // caller held no pin on it).
  WARPSTORE_HD const T* pinned_element(std::uint64_t i) const {
    const std::uint32_t slot = cache.find_slot(cache_ref::key(source, line_of(i)));
    return slot < cache.num_lines ? element_in(slot, i) : nullptr;
  }

  // The element-type-free view of this array's lines (write-back, flush).
  WARPSTORE_HD detail::line_io lines() const {
    return {cache, io, errors, first_block, end_block, timeout_ns, source};
  }

 private:
  WARPSTORE_HD std::uint64_t line_of(std::uint64_t i) const { return i >> elems_per_line_log2; }

  WARPSTORE_HD T* element_in(std::uint32_t slot, std::uint64_t i) const {
    return reinterpret_cast<T*>(cache.line_data(slot)) + (i & ((1ull << elems_per_line_log2) - 1));
  }

  // Warp-collective span bounds: one lane records a bad span.
  WARPSTORE_HD bool check_span(std::uint64_t first, std::uint64_t n, unsigned rank) const {
    if (!bounds_check || (first <= count && n <= count - first)) return true;
    if (rank == 0)
      errors->record(error_kind::index_out_of_range, source,
                     nvme::status::make(nvme::status_type::vendor, nvme::sc::index_out_of_range),
                     first + n - 1, 0);
    return false;
  }

  // A store to an array over a read-only open is refused here, before it
  // dirties a line that could never be written back.
  WARPSTORE_HD bool check_writable(std::uint64_t i) const {
    if (writable) return true;
    errors->record(error_kind::io, source,
                   nvme::status::make(nvme::status_type::generic,
                                      nvme::sc::namespace_write_protected),
                   i, 0);
    return false;
  }

  // The lanes calling this member on THIS array together. __activemask()
  // alone is wrong: it names the lanes converged at this instruction, and
  // under independent thread scheduling those may be calling the same
  // member on a DIFFERENT array_ref (a loop over arrays whose lanes drift a
  // step apart: warpstore-taxi's selected lanes reading further columns,
  // lanes of one scan step at column 2 converged with lanes of the next at
  // column 1). with_line's collectives assume one array: io_ref::read_queues
  // has the non-waiting lanes copy staging_of(ticket) of their OWN queue
  // pair, and execute_memory reads each lane's OWN host copy, so a line
  // filled for one array got every n-th 16 bytes from another controller's
  // staging (silently wrong rows, only with two or more arrays, only with
  // divergent callers); take_tickets also handed one pair's tickets to lanes
  // of another. The cache and source id together name one array
  // (tests/gpu/gpu_array_read_test.cu: DivergentCallersOnTwoArraysGetTheirOwnBytes).
  // Keep the two matches: a shuffle-and-vote fast path for "every caller on
  // one array" made warpstore-kv on the memory controller fault with an
  // illegal address in 3 of 3 runs on the H100 (2026-11-22); callers reach
  // this from different call sites, where only the matches held up.
  WARPSTORE_HD unsigned calling_mask() const {
    const unsigned same_cache = detail::warp::match_any(
        detail::warp::active_mask(),
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(cache.tags)));
    return detail::warp::match_any(same_cache, source);
  }

  WARPSTORE_HD bool check_index(std::uint64_t i) const {
    if (!bounds_check || i < count) return true;
    errors->record(error_kind::index_out_of_range, source,
                   nvme::status::make(nvme::status_type::vendor, nvme::sc::index_out_of_range), i,
                   0);
    return false;
  }


  // ---- asynchronous batches (prefetch, post_write_back, wait) ----

  WARPSTORE_HD std::uint64_t element_of_line(const batch_ticket& t, std::uint64_t line) const {
    const std::uint64_t e = line << elems_per_line_log2;
    return e < t.first ? t.first : e;
  }

  // The lanes wait() and release() work over: those that posted `t`, once
  // all of them are here. Not calling_mask(): __activemask() names the
  // lanes converged at this instruction, and a kernel whose lanes leave a
  // per-lane loop at different trips (i = first + lane; i < first + n;
  // i += 32, with n % 32 != 0) reaches wait or release in two groups. Each
  // group then recomputed lanes and ranks from its own mask, or the whole
  // warp from a full one, while the batch was posted with another: lanes
  // disagreed on chunk_lines, so some ran one more round of complete_part's
  // collect loop while others were already in with_line, and the shuffles
  // of io_ref::broadcast paired different fields of different lanes (a READ
  // copied to an slba as its destination: misaligned writes on the H100);
  // a group's ranks also named other lanes' tickets and lines, and release
  // unpinned every line once per group. A ticket never posted (0) falls
  // back to the calling lanes: there is nothing to collect.
  WARPSTORE_HD unsigned batch_mask(const batch_ticket& t) const {
    if (t.mask == 0) return calling_mask();
    detail::warp::sync(t.mask);  // the posting lanes, reconverged
    return t.mask;
  }

  // Unpins lines [from, to) of this array, one pin each (the caller holds
  // them, so their tags are stable).
  WARPSTORE_HD void unpin_lines(std::uint64_t from, std::uint64_t to, unsigned lanes,
                                unsigned rank) const {
    for (std::uint64_t line = from + rank; line < to; line += lanes) {
      const std::uint32_t slot = cache.find_slot(cache_ref::key(source, line));
      if (slot < cache.num_lines) cache.release(slot, 1);
    }
  }

  WARPSTORE_HD batch_ticket post_batch(std::uint64_t first, std::uint64_t n,
                                       std::uint8_t kind) const {
    const unsigned mask = calling_mask();
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

  // Round r of the part in flight as lane `rank` sees it: whether it has a
  // command, which lanes do, its line and request, and (queues) its ticket
  // in the part's window; `offset` counts the window's tickets of earlier
  // rounds. Warp-collective over `mask`.
  struct busy_round {
    bool active;
    unsigned busy_lanes;
    std::uint64_t line;
    io_request req;
    std::uint64_t ticket;
  };
  WARPSTORE_HD busy_round round_of(const batch_ticket& t, std::uint32_t r, unsigned mask,
                                   unsigned lanes, unsigned rank, const detail::line_io& l,
                                   std::uint32_t& offset) const {
    busy_round b;
    b.active = ((t.busy >> r) & 1u) != 0;
    b.busy_lanes = detail::warp::ballot(mask, b.active);
    b.line = t.chunk_line + r * lanes + rank;
    b.req = l.request_for(b.line, t.slots[r]);
    b.ticket = t.window + offset + detail::warp::rank_in(b.busy_lanes, detail::warp::lane());
    offset += detail::warp::popcount(b.busy_lanes);
    return b;
  }

  // Claims the lines of the part starting at t.chunk_line and posts their
  // commands in one window. Lane `rank` takes line chunk_line + r * lanes +
  // rank in round r.
  WARPSTORE_HD void post_part(batch_ticket& t, unsigned mask, unsigned lanes,
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

  // A line's command is over (or never went out): publish or give it up.
  WARPSTORE_HD void finish_line(batch_ticket& t, std::uint32_t r, std::uint64_t line,
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

  // Collects the part in flight: its own commands first (they depend on no
  // other warp), then the deferred lines the ordinary way.
  WARPSTORE_HD void complete_part(batch_ticket& t, unsigned mask, unsigned lanes,
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

  // The read path of DESIGN.md: coalesce, probe, claim, fill, publish. Every
  // lane of `mask` calls; lanes with `want` get the line pinned and call
  // use(slot) in the round it is granted, or get an error recorded. Rounds
  // repeat for lanes told to retry. Without Keep the pins are given back in
  // the round they were granted, so no lane holds a line while the warp waits
  // for others: warps cannot starve each other of lines, however many more
  // lines they want than the cache holds. With Keep the caller holds them
  // (line_grant::pins on each group leader).
  //
  // With Write, use(slot) writes into the line: a filled line is published
  // dirty after its whole group wrote, a hit line is marked dirty before its
  // pins go back. `overwrite` (same for a group) says the group writes every
  // byte of the line, so a miss claims it without reading. A set with no
  // clean victim hands its leader (reader or writer) a dirty line to write
  // back first.
  template <bool Keep, bool Write = false, class Use>
  WARPSTORE_HD detail::line_grant with_line(unsigned mask, bool want, std::uint64_t line,
                                            std::uint64_t index, Use&& use,
                                            bool overwrite = false) const {
    const detail::line_io l = lines();
    detail::line_grant g;
    bool pending = want;
    detail::deadline dl(timeout_ns);
    std::uint32_t round = 0;
    while (detail::warp::ballot(mask, pending) != 0) {
      const std::uint64_t k = pending ? cache_ref::key(source, line) : 0;
      const unsigned group = detail::warp::match_any(mask, k);
      const unsigned leader = detail::warp::first_lane(group);
      const bool is_leader = pending && detail::warp::lane() == leader;
      acquire_result r{0, acquire_kind::retry};
      if (is_leader) r = cache.acquire(k, detail::warp::popcount(group));
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
      // 0: retry (or wrote a line back), 1: line pinned, 2: fill failed
      // (pins held, no data), 3: write-back failed (no pins)
      const bool granted = r.kind == acquire_kind::hit || r.kind == acquire_kind::fill;
      const std::uint32_t outcome = !is_leader ? 0u
                                    : granted  ? (st.success() ? 1u : 2u)
                                               : (written_back ? 0u : 3u);
      const std::uint32_t got = detail::warp::shfl(mask, outcome, leader);
      const std::uint32_t slot = detail::warp::shfl(mask, r.slot, leader);
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
        if (dl.expired()) {
          pending = false;
          errors->record(error_kind::deadline, source, nvme::status::deadline(), index,
                         l.request_for(line, 0).slba);
        } else if (!wrote_back) {
          // Exponential backoff: when more lines are wanted at once than the
          // cache holds, waiting lanes must leave the memory system to the
          // fills that free lines. A warp that just made room looks again
          // at once.
          detail::backoff(64u << (round < 9 ? round : 9));
        }
      }
    }
    return g;
  }
};

}  // namespace warpstore
