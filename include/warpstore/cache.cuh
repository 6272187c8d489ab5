// The software cache in GPU memory: a fixed pool of lines allocated once.
//
// Organisation: hashed set-associative. A line key (source id, line index)
// hashes to a set of `ways` lines; tags and state words exist only per cache
// line, so metadata is proportional to the cache, never to the dataset.
//
// Per-line state word: reference count (pins), valid, busy (being filled or
// written back; owned by one thread), dirty, and the clock reference bit.
//
//  - Hit: read the tag, add the group's pin count to the state; the pin holds
//    only if the line was valid, not busy, and still carries the tag.
//  - Miss: take the set's insert lock (held for a scan, never across I/O),
//    re-check the tag, pick a victim by clock (reference bit gives a second
//    chance; pinned, busy and dirty lines are skipped), claim it busy with the
//    group's pins in one CAS, write the new tag, unlock, fill, publish valid.
//  - Write: a pinned line is written in place and marked dirty before the pin
//    goes back. A set with no clean victim hands one dirty line of the
//    source to the caller for write-back instead: claimed busy (its
//    tag stays, so readers of it wait rather than read the file's stale
//    bytes), the lock released, the caller writes it with a WRITE command and
//    clears busy and dirty. Many warps write back at once and nobody holds a
//    lock across the I/O, so a write-heavy kernel overlaps its write-backs.
//  - Eviction of a dirty line (reclaim): the caller that was handed it may
//    instead take its slot at once for the line it wants, under the set
//    lock, and send the old bytes and the new line's READ together (the
//    WRITE's bytes leave the slot before the READ lands). Until that WRITE
//    completes, the old key counts as an eviction in flight: a fill of it
//    waits (retries) rather than read the file's stale bytes.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "warpstore/detail/hash.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/io.cuh"
#include "warpstore/nvme.h"
#include "warpstore/runtime.h"
#include "warpstore/settings.h"

namespace warpstore {

namespace line_state {
inline constexpr std::uint32_t pins = 0x00FFFFFFu;  // reference count
inline constexpr std::uint32_t valid = 1u << 24;
inline constexpr std::uint32_t busy = 1u << 25;
inline constexpr std::uint32_t dirty = 1u << 26;
inline constexpr std::uint32_t referenced = 1u << 27;
}  // namespace line_state

// Counters, sharded so that hot paths on different SMs do not contend.
struct alignas(128) cache_counters {
  std::uint64_t hits;        // groups served by a valid line
  std::uint64_t misses;      // groups that filled a line
  std::uint64_t evictions;   // valid lines replaced
  std::uint64_t writebacks;  // dirty lines written (write path)
  std::uint64_t bytes_read;  // bytes brought into the cache
  std::uint64_t retries;     // accesses that had to look again (line busy, no victim)
  std::uint64_t errors;      // fills that failed
  std::uint64_t overlapped_evictions;  // dirty lines evicted in one trip with the fill (reclaim)
  std::uint64_t read_around;  // groups that read host memory rather than wait for a line
};

enum class acquire_kind : std::uint32_t {
  hit,    // pinned a valid line
  fill,   // claimed a line, pinned and busy: the caller must fill and publish it
  retry,  // nothing held; try again (line being filled, set locked, no victim)
  write_back,  // claimed a dirty line (key old_key) busy, no pins: the caller
               // writes it and calls finish_write_back, then tries again
};

// Where the lines of one source (an array) live in storage: what any warp
// needs to write back a dirty line of it, whichever array it is serving.
struct cache_source {
  io_ref io;
  std::uint64_t first_block;  // logical block of the array's byte 0
  std::uint64_t end_block;    // one past the last block of the backing file
};

struct acquire_result {
  std::uint32_t slot;
  acquire_kind kind;
  std::uint64_t old_key = 0;
  // A retry because another caller held the set's lock: a moment's wait (a
  // scan of one set, never I/O), not a shortage of lines.
  bool contended = false;
};

struct cache_ref {
  // How long a caller told to retry because a set's lock was held
  // (acquire_result::contended) waits before it looks again.
  static constexpr std::uint32_t contended_backoff_ns = 256;

  std::byte* lines;           // num_lines * line_size bytes
  std::uint64_t* tags;        // [num_lines], 0 = empty
  std::uint32_t* states;      // [num_lines]
  std::uint32_t* set_locks;   // [num_sets]
  std::uint32_t* set_hands;   // [num_sets] clock hands
  std::uint32_t* set_urgent;  // [num_sets] callers waiting there with priority
  std::uint32_t* evictions_in_flight;  // [eviction_mask + 1] by key hash: evicted
                                       // lines whose WRITE has not completed
  cache_counters* counters;   // [counter_shards]
  cache_source* sources;      // [max_sources], by source id
  std::uint32_t num_lines;
  std::uint32_t ways;
  std::uint32_t num_sets;     // any count from 1 (not only powers of two)
  std::uint32_t line_size;    // power of two
  std::uint32_t line_shift;
  std::uint32_t counter_shards;  // power of two
  std::uint32_t eviction_mask;   // power of two minus one

  // Key of line `line` of source `source`; never 0.
  WARPSTORE_HD static std::uint64_t key(std::uint32_t source, std::uint64_t line) {
    return (static_cast<std::uint64_t>(source) << 48) | (line + 1);
  }
  WARPSTORE_HD static std::uint32_t source_of(std::uint64_t k) {
    return static_cast<std::uint32_t>(k >> 48);
  }
  WARPSTORE_HD static std::uint64_t line_of(std::uint64_t k) {
    return (k & ((std::uint64_t{1} << 48) - 1)) - 1;
  }

  WARPSTORE_HD std::byte* line_data(std::uint32_t slot) const {
    return lines + (static_cast<std::size_t>(slot) << line_shift);
  }

  WARPSTORE_HD std::uint32_t set_of(std::uint64_t k) const {
    k = detail::murmur3_fmix64(k);
    // Multiply-shift onto [0, num_sets): uniform for any number of sets.
    return static_cast<std::uint32_t>(
        (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k)) * num_sets) >> 32);
  }

  WARPSTORE_HD cache_counters& shard() const {
    return counters[detail::locality_id() & (counter_shards - 1)];
  }
  WARPSTORE_HD void count(std::uint64_t cache_counters::*field, std::uint64_t n = 1) const {
    detail::device_atomic<std::uint64_t>(shard().*field).fetch_add(n, detail::memory_order_relaxed);
  }

  // Pins the line of `k` for `pins` readers, or claims a line to fill.
  // Never spins: a caller told to retry holds nothing and should back off.
  // Under contention (more lines wanted at once than the cache holds) the
  // losers touch only plain loads, so the winners' atomics stay fast.
  //
  // Victims go first to callers that have waited long (`urgent`, after
  // begin_urgent): while any waits in the set, others may still hit but
  // take no victim there. Without it a freed line goes to whoever looks
  // first, most often the caller that just let go of one, and a waiter
  // could wait for most of a launch (on the CPU target, 24 threads behind a
  // 4-line cache: 400 to 600 ms of a 600 ms run) until its deadline's last
  // extension ran out.
  WARPSTORE_HD acquire_result acquire(std::uint64_t k, std::uint32_t pin_count,
                                      bool urgent = false) const {
    const std::uint32_t set = set_of(k);
    const std::uint32_t base = set * ways;
    // Hit path: no lock. The scan is only a hint (the pin re-checks the tag),
    // so it may read the tags of the set in wide loads from L2.
    const std::uint32_t found = find_way(base, k);
    if (found < ways) {
      const std::uint32_t i = base + found;
      if ((state(i).load(detail::memory_order_relaxed) & line_state::busy) != 0)
        return {0, acquire_kind::retry};  // being filled: look again later
      const std::uint32_t old = state(i).fetch_add(pin_count, detail::memory_order_acquire);
      if ((old & (line_state::valid | line_state::busy)) == line_state::valid &&
          tag(i).load(detail::memory_order_relaxed) == k) {
        if ((old & line_state::referenced) == 0)
          state(i).fetch_or(line_state::referenced, detail::memory_order_relaxed);
        count(&cache_counters::hits);
        return {i, acquire_kind::hit};
      }
      state(i).fetch_sub(pin_count, detail::memory_order_relaxed);
      return {0, acquire_kind::retry};  // being filled or replaced: look again later
    }
    // Miss path. Callers waiting with priority take the set's victims
    // first. A set whose every way is pinned or busy has no victim: say so
    // without touching the lock.
    if (!urgent && detail::device_atomic<std::uint32_t>(set_urgent[set]).load(
                       detail::memory_order_relaxed) != 0)
      return {0, acquire_kind::retry};
    if (!has_candidate(base)) return {0, acquire_kind::retry};
    detail::device_atomic<std::uint32_t> lock(set_locks[set]);
    if (lock.load(detail::memory_order_relaxed) != 0 ||
        lock.exchange(1, detail::memory_order_acquire) != 0)
      return {0, acquire_kind::retry, 0, true};
    if (find_way(base, k) < ways) {  // inserted meanwhile
      lock.store(0, detail::memory_order_release);
      return {0, acquire_kind::retry};
    }
    const std::uint32_t hand = set_hands[set];
    std::uint32_t dirty_way = ways;  // a line to write back if no clean victim turns up
    for (std::uint32_t step = 0; step < 2 * ways; ++step) {
      const std::uint32_t w = (hand + step) % ways;
      const std::uint32_t i = base + w;
      std::uint32_t s = state(i).load(detail::memory_order_relaxed);
      if ((s & (line_state::pins | line_state::busy)) != 0) continue;
      if ((s & line_state::dirty) != 0) {
        // Dirty lines get a second chance too (a written line starts
        // referenced): the one written back is one the clock passed since its
        // last write, whose neighbours were most likely written by then as
        // well, so its write-back cluster goes out whole.
        if ((s & line_state::referenced) != 0 && step < ways)
          state(i).fetch_and(~line_state::referenced, detail::memory_order_relaxed);
        else if (dirty_way == ways)
          dirty_way = w;
        continue;
      }
      if ((s & line_state::referenced) != 0 && step < ways) {  // second chance
        state(i).fetch_and(~line_state::referenced, detail::memory_order_relaxed);
        continue;
      }
      if (!state(i).compare_exchange_strong(s, line_state::busy | pin_count,
                                            detail::memory_order_acquire,
                                            detail::memory_order_relaxed))
        continue;  // pinned meanwhile
      const std::uint64_t old_tag = tag(i).load(detail::memory_order_relaxed);
      tag(i).store(k, detail::memory_order_relaxed);
      set_hands[set] = (w + 1) % ways;
      lock.store(0, detail::memory_order_release);
      if (old_tag != 0 && (s & line_state::valid) != 0) count(&cache_counters::evictions);
      count(&cache_counters::misses);
      return {i, acquire_kind::fill};
    }
    if (dirty_way < ways) {
      const std::uint32_t i = base + dirty_way;
      std::uint64_t old_key = 0;
      const bool claimed = claim_dirty(i, old_key);
      set_hands[set] = (dirty_way + 1) % ways;
      lock.store(0, detail::memory_order_release);
      if (claimed) return {i, acquire_kind::write_back, old_key};
      return {0, acquire_kind::retry};
    }
    lock.store(0, detail::memory_order_release);
    return {0, acquire_kind::retry};  // every way pinned or busy
  }

  // A caller that has waited long for a line of set `set` (its deadline
  // overdue) claims priority there until it is served or gives up
  // (end_urgent): newcomers defer to it (acquire).
  WARPSTORE_HD void begin_urgent(std::uint32_t set) const {
    detail::device_atomic<std::uint32_t>(set_urgent[set]).fetch_add(1, detail::memory_order_relaxed);
  }
  WARPSTORE_HD void end_urgent(std::uint32_t set) const {
    detail::device_atomic<std::uint32_t>(set_urgent[set]).fetch_sub(1, detail::memory_order_relaxed);
  }

  // Whether a state word is a line ready to be written back: valid, dirty,
  // unpinned and not busy.
  WARPSTORE_HD static bool idle_dirty(std::uint32_t s) {
    constexpr std::uint32_t want = line_state::valid | line_state::dirty;
    return (s & (line_state::pins | line_state::busy | want)) == want;
  }

  // Claims line `slot` busy for write-back if it is idle and dirty
  // (idle_dirty); `old_key` gets its key. Nothing is pinned.
  WARPSTORE_HD bool claim_dirty(std::uint32_t slot, std::uint64_t& old_key) const {
    std::uint32_t s = state(slot).load(detail::memory_order_relaxed);
    if (!idle_dirty(s)) return false;
    if (!state(slot).compare_exchange_strong(s, s | line_state::busy, detail::memory_order_acquire,
                                             detail::memory_order_relaxed))
      return false;
    old_key = tag(slot).load(detail::memory_order_relaxed);  // stable while busy
    return true;
  }

  // Claims the line of key `k` for write-back, as claim_dirty, if the cache
  // holds it dirty and idle (write-back clustering: neighbours of a line
  // being written back go with it). `slot` gets its slot, `old_key` the key
  // it holds once claimed, which is the one to write it under.
  WARPSTORE_HD bool claim_dirty_key(std::uint64_t k, std::uint32_t& slot,
                                    std::uint64_t& old_key) const {
    const std::uint32_t base = set_of(k) * ways;
    const std::uint32_t w = find_way(base, k);
    if (w == ways) return false;
    slot = base + w;
    return claim_dirty(slot, old_key);
  }

  // The state word of the line of key `k` if the cache holds it, else 0: a
  // hint, from plain loads (a flush looks for a cluster's first dirty line,
  // eager write-back for a whole cluster of dirty, idle lines).
  WARPSTORE_HD std::uint32_t state_of_key(std::uint64_t k) const {
    const std::uint32_t base = set_of(k) * ways;
    const std::uint32_t w = find_way(base, k);
    return w == ways ? 0u : state(base + w).load(detail::memory_order_relaxed);
  }

  // The slot holding the line of key `k`, or num_lines if the cache holds
  // none. Only a hint unless the caller holds a pin on that line (a pinned
  // line keeps its tag).
  WARPSTORE_HD std::uint32_t find_slot(std::uint64_t k) const {
    const std::uint32_t base = set_of(k) * ways;
    const std::uint32_t w = find_way(base, k);
    return w == ways ? num_lines : base + w;
  }

  // A digest of the set of key `k` (every way's tag and state word): it
  // changes whenever a line of the set is pinned, released, claimed,
  // published or replaced. A caller waiting for a line or a victim there is
  // behind others, not stuck, while it changes (deadline::expired(progress)).
  // Plain loads; a scan of `ways` words, for the retry path only.
  WARPSTORE_HD std::uint64_t set_digest(std::uint64_t k) const {
    const std::uint32_t base = set_of(k) * ways;
    std::uint64_t h = 0;
    for (std::uint32_t w = 0; w < ways; ++w) {
      const std::uint64_t st = state(base + w).load(detail::memory_order_relaxed);
      h = (h ^ tag(base + w).load(detail::memory_order_relaxed) ^ (st << 32 | w)) *
          0x9E3779B97F4A7C15ull;
    }
    return h;
  }

  // Whether the set of key `k` lacks `k` and every one of its ways is
  // pinned (none being filled): no victim until some holder lets go. A hint
  // from plain loads, for the message of a wait that gave up.
  WARPSTORE_HD bool set_all_pinned(std::uint64_t k) const {
    const std::uint32_t base = set_of(k) * ways;
    if (find_way(base, k) < ways) return false;
    for (std::uint32_t w = 0; w < ways; ++w) {
      const std::uint32_t st = state(base + w).load(detail::memory_order_relaxed);
      if ((st & line_state::pins) == 0 || (st & line_state::busy) != 0) return false;
    }
    return true;
  }

  // After a write-back: the line is clean and valid again (or, if the WRITE
  // failed, still dirty, so a later flush tries again).
  WARPSTORE_HD void finish_write_back(std::uint32_t slot, bool written) const {
    if (written) {
      state(slot).fetch_and(~(line_state::busy | line_state::dirty), detail::memory_order_release);
      count(&cache_counters::writebacks);
    } else {
      state(slot).fetch_and(~line_state::busy, detail::memory_order_release);
      count(&cache_counters::errors);
    }
  }

  // Eviction of a dirty line in one trip. The caller holds `slot` claimed
  // for write-back (acquire_kind::write_back, key old_key, no pins) and wants
  // key `k` of the same set: under the set lock, unless `k` was inserted
  // meanwhile or is itself an eviction in flight, the slot becomes a fill of
  // `k` for `pin_count` pins (as acquire's fill) while its bytes are still
  // old_key's, and old_key counts as an eviction in flight. The caller must
  // then write the bytes back under old_key before it fills the slot, and
  // call end_eviction(old_key) once that WRITE completed. Otherwise (false)
  // the slot goes back to being dirty and idle, and the caller retries.
  WARPSTORE_HD WARPSTORE_COLD bool reclaim(std::uint32_t slot, std::uint64_t old_key,
                                           std::uint64_t k, std::uint32_t pin_count,
                                           detail::deadline& dl) const {
    const std::uint32_t set = slot / ways;
    detail::device_atomic<std::uint32_t> lock(set_locks[set]);
    while (lock.load(detail::memory_order_relaxed) != 0 ||
           lock.exchange(1, detail::memory_order_acquire) != 0) {
      if (dl.expired()) {  // a lock is held for a scan only: should never happen
        state(slot).fetch_and(~line_state::busy, detail::memory_order_release);
        return false;
      }
      dl.pause();
    }
    if (find_way(set * ways, k) < ways || eviction_pending(k)) {
      lock.store(0, detail::memory_order_release);
      state(slot).fetch_and(~line_state::busy, detail::memory_order_release);
      return false;
    }
    evictions(old_key).fetch_add(1, detail::memory_order_relaxed);  // published by the unlock
    // Busy stays set: readers of either key keep away. Pins a failed hit
    // added and is about to take back stay balanced (atomic and/add).
    state(slot).fetch_and(line_state::busy | line_state::pins, detail::memory_order_relaxed);
    state(slot).fetch_add(pin_count, detail::memory_order_relaxed);
    tag(slot).store(k, detail::memory_order_relaxed);
    lock.store(0, detail::memory_order_release);
    count(&cache_counters::evictions);
    count(&cache_counters::misses);
    count(&cache_counters::overlapped_evictions);
    return true;
  }

  // The WRITE of an evicted line's bytes (reclaim) completed, well or not.
  WARPSTORE_HD void end_eviction(std::uint64_t old_key, bool written) const {
    evictions(old_key).fetch_sub(1, detail::memory_order_release);
    count(written ? &cache_counters::writebacks : &cache_counters::errors);
  }

  // Whether some evicted line that hashes like `k` is still being written:
  // a fill of `k` must not read the file until it is (conservative: another
  // key of the same hash also makes it wait).
  WARPSTORE_HD bool eviction_pending(std::uint64_t k) const {
    return evictions(k).load(detail::memory_order_acquire) != 0;
  }

  // Gives up a fill claimed by acquire (slot busy, `pin_count` pins) before
  // anything was read: the slot is empty again, for anyone.
  WARPSTORE_HD void cancel_fill(std::uint32_t slot, std::uint32_t pin_count) const {
    tag(slot).store(0, detail::memory_order_relaxed);
    state(slot).fetch_sub(line_state::busy + pin_count, detail::memory_order_release);
  }

  // A writer that holds a pin on the line marks it dirty before unpinning.
  WARPSTORE_HD void mark_dirty(std::uint32_t slot) const {
    if ((state(slot).load(detail::memory_order_relaxed) & line_state::dirty) == 0)
      state(slot).fetch_or(line_state::dirty, detail::memory_order_relaxed);
  }

  // Whether `slot` holds a published line (valid, not busy). A relaxed
  // load: exact for a line the caller holds a pin on (it stays published),
  // a hint otherwise.
  WARPSTORE_HD bool published(std::uint32_t slot) const {
    const std::uint32_t s = state(slot).load(detail::memory_order_relaxed);
    return (s & (line_state::valid | line_state::busy)) == line_state::valid;
  }
  WARPSTORE_HD std::uint32_t state_of(std::uint32_t slot) const {
    return state(slot).load(detail::memory_order_acquire);
  }
  WARPSTORE_HD std::uint64_t tag_of(std::uint32_t slot) const {
    return tag(slot).load(detail::memory_order_relaxed);
  }

  // After a fill: publish the line valid (its bytes ordered before the flag),
  // and dirty and referenced if its filler wrote to it. A claimed line is
  // never dirty nor referenced.
  WARPSTORE_HD void publish(std::uint32_t slot, std::uint32_t bytes, bool dirty = false) const {
    constexpr std::uint32_t written = line_state::dirty | line_state::referenced;
    state(slot).fetch_xor(line_state::busy | line_state::valid | (dirty ? written : 0u),
                          detail::memory_order_release);
    if (bytes != 0) count(&cache_counters::bytes_read, bytes);
  }

  // After a failed fill: forget the tag so later readers try again, then
  // drop busy. The failing group still holds its pins until release().
  WARPSTORE_HD void abandon(std::uint32_t slot) const {
    tag(slot).store(0, detail::memory_order_relaxed);
    state(slot).fetch_and(~line_state::busy, detail::memory_order_release);
    count(&cache_counters::errors);
  }

  WARPSTORE_HD void release(std::uint32_t slot, std::uint32_t pin_count) const {
    state(slot).fetch_sub(pin_count, detail::memory_order_release);
  }

 private:
  // Whether some way of the set could become a victim or be written back (no
  // pins, not busy). A hint read with plain loads; the CAS decides.
  WARPSTORE_HD bool has_candidate(std::uint32_t base) const {
    constexpr std::uint32_t blocked = line_state::pins | line_state::busy;
#if WARPSTORE_ON_GPU
    if ((ways & 3u) == 0) {
      const auto* quads = reinterpret_cast<const uint4*>(states + base);
      for (std::uint32_t w = 0; w < ways / 4; ++w) {
        const uint4 q = __ldcg(quads + w);
        if (((q.x & blocked) == 0) || ((q.y & blocked) == 0) || ((q.z & blocked) == 0) ||
            ((q.w & blocked) == 0))
          return true;
      }
      return false;
    }
#endif
    for (std::uint32_t w = 0; w < ways; ++w)
      if ((state(base + w).load(detail::memory_order_relaxed) & blocked) == 0) return true;
    return false;
  }

  // Way of set `base` holding tag `k`, or `ways` if none.
  WARPSTORE_HD std::uint32_t find_way(std::uint32_t base, std::uint64_t k) const {
#if WARPSTORE_ON_GPU
    if ((ways & 7u) == 0) {  // eight tags (64 bytes) per step, loads issued together
      const auto* quads = reinterpret_cast<const ulonglong2*>(tags + base);
      for (std::uint32_t w = 0; w < ways; w += 8, quads += 4) {
        ulonglong2 t[4];
WARPSTORE_UNROLL
        for (int j = 0; j < 4; ++j) t[j] = __ldcg(quads + j);
WARPSTORE_UNROLL
        for (std::uint32_t j = 0; j < 4; ++j) {
          if (t[j].x == k) return w + 2 * j;
          if (t[j].y == k) return w + 2 * j + 1;
        }
      }
      return ways;
    }
#endif
    for (std::uint32_t w = 0; w < ways; ++w)
      if (tag(base + w).load(detail::memory_order_relaxed) == k) return w;
    return ways;
  }

  WARPSTORE_HD detail::device_atomic<std::uint64_t> tag(std::uint32_t i) const {
    return detail::device_atomic<std::uint64_t>(tags[i]);
  }
  WARPSTORE_HD detail::device_atomic<std::uint32_t> state(std::uint32_t i) const {
    return detail::device_atomic<std::uint32_t>(states[i]);
  }
  WARPSTORE_HD detail::device_atomic<std::uint32_t> evictions(std::uint64_t k) const {
    // Another mix of the key than set_of's, so keys of one set spread out.
    const std::uint64_t h = (k ^ (k >> 29)) * detail::golden_gamma;
    return detail::device_atomic<std::uint32_t>(
        evictions_in_flight[static_cast<std::uint32_t>(h >> 32) & eviction_mask]);
  }
};

// Host totals of the counters.
struct cache_stats {
  std::uint64_t hits = 0, misses = 0, evictions = 0, writebacks = 0, bytes_read = 0, retries = 0,
                errors = 0, overlapped_evictions = 0, read_around = 0;
  // Accesses served by the cache, of all (a read around is not).
  double hit_rate() const {
    const std::uint64_t n = hits + misses + read_around;
    return n == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(n);
  }
};

// Owning host object: allocates the lines and metadata once, frees them at
// the end. Several arrays may share one cache (each gets its own source id).
class cache {
 public:
  // `bytes` is rounded down to whole sets (line_size * ways bytes each; any
  // number of sets, so a multiple of the set size is honoured exactly); throws std::invalid_argument for
  // a bad line size or way count, warpstore::runtime_error if the GPU lacks
  // the memory.
  cache(std::size_t bytes, std::uint32_t line_size, std::uint32_t ways = 16);
  explicit cache(const options& opts) : cache(opts.cache_bytes, opts.line_size, opts.ways) {}

  const cache_ref& ref() const { return ref_; }
  std::uint32_t line_size() const { return ref_.line_size; }
  std::uint32_t num_lines() const { return ref_.num_lines; }
  std::size_t bytes() const { return std::size_t{ref_.num_lines} * ref_.line_size; }
  cache_stats stats() const;
  void reset_stats();
  // Drops every line, dirty ones unwritten (no line may be pinned: call
  // between kernels, after flushing arrays that wrote). What a controller
  // holds of the file besides (the host controller's read-ahead extents)
  // stays: controller::forget_file_bytes drops it, as Python's
  // clear_cache() does after this.
  void clear();
  // A fresh source id for an array that shares this cache, and where its
  // lines go (any warp may write back any source's dirty line). The array
  // must flush before it goes away. Safe from several threads.
  std::uint32_t next_source_id();
  void register_source(std::uint32_t id, const cache_source& where);
  // Gives back the id of an array that is gone (flushed, destroyed): its
  // lines are dropped and the id serves the next array, so a cache shared by
  // arrays opened and closed over and over never runs out of ids. No kernel
  // may use the cache meanwhile; a line of the source still pinned, being
  // filled or dirty raises std::logic_error and nothing is dropped.
  void retire_source(std::uint32_t id);
  static constexpr std::uint32_t max_sources = 1024;

 private:
  cache_ref ref_{};
  runtime::device_ptr<std::byte> lines_;
  runtime::device_ptr<std::uint64_t> tags_;
  runtime::device_ptr<std::uint32_t> states_;
  // The sets' locks, hands and priority counts, then evictions_in_flight.
  runtime::device_ptr<std::uint32_t> set_words_;
  std::size_t set_word_count_ = 0;
  runtime::device_ptr<cache_counters> counters_;
  runtime::device_ptr<cache_source> sources_;
  std::mutex sources_mutex_;  // guards next_source_ and free_sources_
  std::uint32_t next_source_ = 1;
  std::vector<std::uint32_t> free_sources_;  // retired ids, reused first
};

}  // namespace warpstore
