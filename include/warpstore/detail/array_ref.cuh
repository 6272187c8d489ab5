// Device view of a storage-backed array: how one element read or write
// travels from a kernel thread through warp coalescing, the cache, and on a
// miss the controller. See array.cuh for the owning host object.
#pragma once

#include <cstdint>
#include <type_traits>

#include "warpstore/batch.cuh"
#include "warpstore/cache.cuh"
#include "warpstore/detail/hash.cuh"
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
  // Miss admission, a caller's choice per launch (a gather whose array's
  // reads miss almost always; see passed_element): on an array that reads
  // around (reads_around), with admit_misses = N > 1 a miss fills its line
  // one time in N (a hash of the line and the clock picks it), and reads
  // the line's bytes straight from host memory otherwise: a 128-byte row
  // then costs 128 bytes over the link rather than a line, and no line is
  // evicted for one never read again. Lines the cache holds hit as ever,
  // and a line read often gets in soon (after N reads on average): a
  // working set that fits is still cached. 0 or 1: every miss fills.
  std::uint32_t admit_misses = 0;

  WARPSTORE_HD std::uint64_t size() const { return count; }

  // Reads element i. Any subset of a warp's lanes may call together, on
  // this array or others (each array's lanes work as their own group, see
  // calling_mask); lanes asking for the same line share one lookup and fill.
  WARPSTORE_HD T operator[](std::uint64_t i) const;

  // Masked read, for callers that know which lanes call together: every
  // lane of `mask` calls (converged or not: the collectives inside sync on
  // `mask`, not on __activemask()); lanes with `want` get element i, the
  // others get T{} and take part only in the warp's collectives (their i is
  // ignored, never checked). Same protocol as operator[].
  WARPSTORE_HD T read_masked(unsigned mask, bool want, std::uint64_t i) const;

  // Pins the line holding element i for this lane (collective over the
  // calling lanes, like operator[]). Returns an invalid line on error.
  //
  // Lanes that got their line keep it pinned while the warp's other lanes
  // wait for theirs, so a launch whose warps pin more lines at once than the
  // cache holds can wait until the deadline: size the cache for the pins held
  // together (operator[] and read_span hold nothing while they wait).
  WARPSTORE_HD pinned_line<T> pin(std::uint64_t i) const;

  // Warp-collective: every calling lane passes the same `first` and `n`;
  // together they copy elements [first, first + n) to out[0..n). `out` must
  // be memory all calling lanes can address (global or shared).
  WARPSTORE_HD bool read_span(std::uint64_t first, std::uint64_t n, T* out) const;

  // Masked spans within one line, for callers that read several spans per
  // warp at once (a Python gather's small rows, a few lanes a row): every
  // lane of `mask` calls; lanes with `want` copy elements first + offset,
  // first + offset + stride, ... below first + n (all in first's line) to
  // out[offset], out[offset + stride], ...; lanes reading one span pass the
  // same first, n and out, and offsets 0 to stride - 1. Lanes whose spans
  // share a line share its lookup and fill (operator[]'s protocol). Returns
  // false (the error recorded) where a wanted span could not be read.
  WARPSTORE_HD bool read_in_line(unsigned mask, bool want, std::uint64_t first, std::uint64_t n,
                                 T* out, unsigned stride, unsigned offset) const;

  // Writes element i (collective over the calling lanes, like operator[]).
  // The line is read first unless present (read-modify-write), then written
  // in the cache and marked dirty; it reaches storage when evicted or
  // flushed. Lanes writing the same element: one of them wins.
  WARPSTORE_HD void store(std::uint64_t i, const T& v) const;

  // Warp-collective like read_span: copies in[0..n) to elements
  // [first, first + n). Lines the span covers whole are not read first.
  WARPSTORE_HD bool write_span(std::uint64_t first, std::uint64_t n, const T* in) const;

  // Device-initiated flush, warp-collective (call it from one warp, after
  // the writes it must cover are done, holding no pins of this array):
  // writes back every dirty line of this array and sends one FLUSH. Returns
  // true when all of it succeeded; failures are recorded for check(). With
  // the memory controller the writes end in pinned host memory, not in the
  // file: the host's flush() takes them there.
  WARPSTORE_HD bool flush() const;

  // Asynchronous batches (batch.cuh). Warp-collective like read_span: every
  // calling lane passes the same `first` and `n`, and the same lanes later
  // pass their own copies of the ticket to wait() (and release()). The
  // ticket remembers those lanes: wait and release reconverge them
  // (__syncwarp over the posting mask), so the warp may reach them diverged.
  // prefetch itself takes the lanes converged at the call (calling_mask):
  // call it from lanes that arrive together. Every batch call returns with
  // its lanes together (leave_together), so a loop of prefetch, wait,
  // reads and release posts each batch with the same lanes.
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
  WARPSTORE_HD batch_ticket prefetch(std::uint64_t first, std::uint64_t n, bool pin = false) const;

  // Posts write-back of the dirty lines among those holding elements
  // [first, first + n) without waiting (warp-collective like prefetch): each
  // dirty, idle line is claimed busy (readers wait for it), its WRITE posted
  // (bytes copied to staging by the warp). wait(t) collects the WRITEs and
  // marks the lines clean (still dirty on failure, recorded). Lines pinned
  // or busy when it looks are left for a later flush. Not durable until a
  // flush. Same rules in flight as prefetch.
  WARPSTORE_HD batch_ticket post_write_back(std::uint64_t first, std::uint64_t n) const;

  // Completes the batch of `t` (see prefetch); warp-uniform result. Waiting
  // again is a no-op that returns the same answer.
  WARPSTORE_HD bool wait(batch_ticket& t) const;

  // Gives back the pins of a waited batch posted with `pin` (waits first if
  // it was not). A failed batch holds none. Warp-collective like wait.
  WARPSTORE_HD void release(batch_ticket& t) const;

  // The address of element i in the cache, for a lane whose warp holds a pin
  // on its line (a waited batch posted with `pin`, or pin()): a tag lookup
  // and the line's state word, no atomics. nullptr when the cache does not
  // hold the line published (then the caller held no pin on it: a pinned
  // line is never busy), never the bytes of a line still being filled.
  WARPSTORE_HD const T* pinned_element(std::uint64_t i) const {
    const std::uint32_t slot = cache.find_slot(cache_ref::key(source, line_of(i)));
    return slot < cache.num_lines && cache.published(slot) ? element_in(slot, i) : nullptr;
  }

  // Whether readers of this array read around the cache rather than wait
  // for a line (with_line): a read-only array over the memory controller.
  WARPSTORE_HD bool reads_around() const { return io.kind == io_kind::memory && !writable; }

  // Miss admission for a reader that reads around itself (admit_misses):
  // warp-collective over `mask`, each lane with its own element i (in
  // range). Returns element i in the controller's host memory when its line
  // is neither in the cache nor admitted this time (one read around counted
  // for the lanes of that line), else nullptr: read it through the cache
  // (operator[], read_span), which fills it on a miss. nullptr for every
  // lane unless admit_misses > 1 on an array that reads around.
  WARPSTORE_HD const T* passed_element(unsigned mask, std::uint64_t i) const;

  // The element-type-free view of this array's lines (write-back, flush).
  WARPSTORE_HD detail::line_io lines() const {
    return {cache, io, errors, first_block, end_block, timeout_ns, source};
  }

 private:
  WARPSTORE_HD std::uint64_t line_of(std::uint64_t i) const { return i >> elems_per_line_log2; }

  // Whether this miss on `line` fills it under admit_misses (see there):
  // a hash of the line and the clock, one time in admit_misses.
  WARPSTORE_HD bool admits(std::uint64_t line) const {
    return detail::mix64(line * detail::golden_gamma ^ detail::cycles()) % admit_misses == 0;
  }

  WARPSTORE_HD T* element_in(std::uint32_t slot, std::uint64_t i) const {
    return reinterpret_cast<T*>(cache.line_data(slot)) + (i & ((1ull << elems_per_line_log2) - 1));
  }
  // Element i in its line's bytes elsewhere (host memory: read around).
  WARPSTORE_HD const T* element_at(const std::byte* line_bytes, std::uint64_t i) const {
    return reinterpret_cast<const T*>(line_bytes) + (i & ((1ull << elems_per_line_log2) - 1));
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

  // Lanes leave a batch call (prefetch, post_write_back, wait, release)
  // together: its per-lane loops (a lane's lines, unpin_lines) end at
  // different trips, and lanes that reach the caller's next call in waves
  // get their masks from __activemask() in waves too. On the H100 such
  // waves came out overlapping (lanes 4, 6, 7, 9 posted a batch with mask
  // 0x2da, lanes 13 to 31 with 0xffffe2d0): lanes disagreed on which of
  // them claimed which line, a claimed line was never filled, and pinned
  // reads after a successful wait read a line still busy (zeros;
  // gpu_array_batch_test's pinned batches, 16 of 24 runs, where a change of
  // code elsewhere in the kernel moved the waves). A barrier over the
  // call's mask costs a few cycles; lanes that entered together leave so.
  WARPSTORE_HD static void leave_together(unsigned mask) { detail::warp::sync(mask); }

  WARPSTORE_HD batch_ticket post_batch(std::uint64_t first, std::uint64_t n,
                                       std::uint8_t kind) const;
  WARPSTORE_HD batch_ticket post_parts(unsigned mask, std::uint64_t first, std::uint64_t n,
                                       std::uint8_t kind) const;

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
                                   std::uint32_t& offset) const;

  // Claims the lines of the part starting at t.chunk_line and posts their
  // commands in one window. Lane `rank` takes line chunk_line + r * lanes +
  // rank in round r.
  WARPSTORE_HD void post_part(batch_ticket& t, unsigned mask, unsigned lanes,
                              unsigned rank) const;

  // A line's command is over (or never went out): publish or give it up.
  WARPSTORE_HD void finish_line(batch_ticket& t, std::uint32_t r, std::uint64_t line,
                                const io_request& req, nvme::status st) const;

  // Collects the part in flight: its own commands first (they depend on no
  // other warp), then the deferred lines the ordinary way.
  WARPSTORE_HD void complete_part(batch_ticket& t, unsigned mask, unsigned lanes,
                                  unsigned rank) const;

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
  //
  // Read around (readers that pass `around`, never with Keep or Write): on a
  // read-only array over the memory controller, a group whose line is not
  // to be had at once (being filled by another warp, its set's lock held,
  // no victim) does not wait: it calls around(bytes), `bytes` the line's
  // bytes in the controller's host memory (the same layout as a cache
  // line), and reads them over PCIe, as the fill would have. Nothing is
  // pinned or filled; the cache counts it (cache_counters::read_around).
  // The file is read-only, so host memory and cache agree.
  template <bool Keep, bool Write = false, class Use, class Around = std::nullptr_t>
  WARPSTORE_HD detail::line_grant with_line(unsigned mask, bool want, std::uint64_t line,
                                            std::uint64_t index, Use&& use,
                                            bool overwrite = false,
                                            Around&& around = nullptr) const;
};

}  // namespace warpstore

// The member definitions, one idea a file.
#include "warpstore/detail/array_ref/with_line.cuh"
#include "warpstore/detail/array_ref/read.cuh"
#include "warpstore/detail/array_ref/write.cuh"
#include "warpstore/detail/array_ref/batch.cuh"
