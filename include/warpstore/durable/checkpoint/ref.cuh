// The device view of a checkpoint group: every warp writes or reads its
// share of the chunks, the last to arrive commits (FLUSH, record, FLUSH) or
// finishes the restore. Part of durable/checkpoint.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "warpstore/array.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/durable/checkpoint/layout.cuh"
#include "warpstore/io.cuh"
#include "warpstore/nvme.h"

namespace warpstore {

namespace detail {

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
  static constexpr unsigned warp_mask = detail::warp::whole;

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

  // The lanes of `mask` with `want`, one after the other, the whole warp
  // helping each: body(src, rank, lanes) runs on every lane of `mask` for
  // lane `src` (this lane being number `rank` of the `lanes`).
  template <class Body>
  WARPSTORE_HD static void each_wanting_lane(unsigned mask, bool want, Body&& body) {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    unsigned todo = detail::warp::ballot(mask, want);
    while (todo) {
      const unsigned src = detail::warp::first_lane(todo);
      todo &= todo - 1;
      body(src, rank, lanes);
    }
  }

  // Every lane of `mask` helps: the lanes with `want` each have a chunk of
  // `len` bytes at `data`; the words go into each helper's `sum`.
  WARPSTORE_HD void checksum_chunks(unsigned mask, bool want, const std::byte* data,
                                    std::uint32_t len, std::uint64_t first_word,
                                    std::uint64_t& sum) const {
    each_wanting_lane(mask, want, [&](unsigned src, unsigned rank, unsigned lanes) {
      const auto* p = reinterpret_cast<const std::byte*>(
          detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(data), src));
      const std::uint32_t n = detail::warp::shfl(mask, len, src) / 8;
      const std::uint64_t w0 = detail::warp::shfl(mask, first_word, src);
      for (std::uint32_t k = rank; k < n; k += lanes)
        sum += ckpt::mix(detail::load_word(p + 8ull * k), w0 + k);
    });
    detail::warp::sync(mask);
  }

  // The staged chunks of the lanes with `want`, one after the other, the
  // whole warp moving each: move(src, buf, staged, o, h, rank, lanes) runs on
  // every lane of `mask` with lane src's buffer (index b), its staged chunk,
  // offset in the buffer and bytes of the buffer in the chunk, and returns
  // false where it failed. True when no lane failed.
  template <class Move>
  WARPSTORE_HD bool each_staged_chunk(unsigned mask, bool want, std::uint32_t b, std::uint64_t off,
                                      std::uint64_t have, const std::byte* data,
                                      Move&& move) const {
    bool ok = true;
    each_wanting_lane(mask, want, [&](unsigned src, unsigned rank, unsigned lanes) {
      const checkpoint_buffer& buf = buffers[detail::warp::shfl(mask, b, src)];
      auto* staged = reinterpret_cast<std::byte*>(
          detail::warp::shfl(mask, reinterpret_cast<std::uint64_t>(data), src));
      const std::uint64_t o = detail::warp::shfl(mask, off, src);
      const std::uint64_t h = detail::warp::shfl(mask, have, src);
      if (!move(src, buf, staged, o, h, rank, lanes)) ok = false;
      detail::warp::sync(mask);
    });
    return detail::warp::ballot(mask, !ok) == 0;
  }

  // Fills the staged chunks of the lanes with `want` (a tail of a device
  // buffer, or a piece of an array) with the buffer's bytes, zero padded.
  WARPSTORE_HD bool stage_in(unsigned mask, bool want, std::uint32_t b, std::uint64_t off,
                             std::uint32_t len, std::uint64_t have, std::byte* data) const {
    const auto fill = [&](unsigned src, const checkpoint_buffer& buf, std::byte* dst,
                          std::uint64_t o, std::uint64_t h, unsigned rank, unsigned lanes) {
      const std::uint32_t n = detail::warp::shfl(mask, len, src);
      bool ok = true;
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
      for (std::uint64_t k = from + rank; k < n; k += lanes)
        dst[k] = k < h ? buf.device[o + k] : std::byte{0};
      return ok;
    };
    return each_staged_chunk(mask, want, b, off, have, data, fill);
  }

  // The other way: the buffer's bytes of each staged chunk leave staging.
  WARPSTORE_HD bool stage_out(unsigned mask, bool want, std::uint32_t b, std::uint64_t off,
                              std::uint64_t have, const std::byte* data) const {
    const auto drain = [&](unsigned src, const checkpoint_buffer& buf, const std::byte* from,
                           std::uint64_t o, std::uint64_t h, unsigned rank, unsigned lanes) {
      if (buf.kind == checkpoint_buffer_kind::array) {
        if (!buf.array.write_span(o, h, from)) {
          if (detail::warp::lane() == src)
            control->fault.record(checkpoint_phase::array_write, b, nvme::status::ok(), o, 0);
          return false;
        }
      } else {
        for (std::uint64_t k = rank; k < h; k += lanes) buf.device[o + k] = from[k];
      }
      return true;
    };
    return each_staged_chunk(mask, want, b, off, have, data, drain);
  }

  // Adds this warp's checksum and arrives; true on the warp that arrived
  // last (every other warp's writes have completed before it sees the count).
  WARPSTORE_HD bool arrive(unsigned mask, std::uint64_t warps, std::uint64_t sum, bool ok) const {
    const std::uint64_t total = detail::warp::sum(mask, sum);
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

}  // namespace warpstore
