// The mixed read/write soak (soak.readwrite): random stores,
// write_spans, reads and read_spans through a cache much smaller than the
// file, checked against a model of the file as they happen.
//
// The model must never be ambiguous, so writes never race: the file is cut
// into chunks, and in each round every chunk belongs to one writer (a warp
// on the GPU, a std::thread on the CPU target) or to nobody (frozen).
// Ownership rotates between rounds, which are separate launches (a kernel
// boundary, or joined threads). Within a round:
//   - a writer writes only its own chunks; within a GPU warp, lane l stores
//     only elements whose index is l modulo 32, and spans start on a multiple
//     of 32, so the lane that wrote an element is the lane that checks it;
//   - reads are checked only where the value is determined: a writer's own
//     chunks (it knows what it wrote) and frozen chunks (nobody writes them).
// Each op is a pure function of (seed, round, writer, op number, lane), so the
// host replays every write into its own copy of the file (a std::vector)
// without trusting what the writers did.
#pragma once

#include <cstdint>

#include "warpstore/array.cuh"
#include "warpstore/detail/hash.cuh"

namespace warpstore::reliability {

// Counters the writers add to (one array of rw_counters words).
enum rw_counter : unsigned {
  rw_checked_bytes = 0,  // bytes read and compared with the model
  rw_wrong_bytes,        // of those, bytes that differed
  rw_wrong_words,        // 8-byte elements with at least one wrong byte
  rw_failed_ops,         // read_span / write_span that reported failure
  rw_stores,
  rw_span_writes,
  rw_reads,
  rw_span_reads,
  rw_device_flushes,
  rw_failed_flushes,
  rw_counters
};

// One round, as every writer sees it.
struct rw_round {
  array_ref<std::uint64_t> a;
  std::uint64_t* model;          // expected value of every element (device memory); a writer
                                 // updates the elements it writes, nobody else touches them
  std::uint64_t* scratch;        // span_max words per writer: span buffers
  unsigned long long* counters;  // rw_counters words
  std::uint64_t seed;
  std::uint64_t round;        // counts on across the runs of one soak: ownership rotates
  std::uint64_t writers;      // W: warps (GPU) or threads (CPU)
  std::uint64_t groups;       // W plus the frozen groups
  std::uint64_t chunks;       // elements / chunk_elems; at least `groups`
  std::uint32_t chunk_elems;  // a multiple of `lanes`
  std::uint32_t span_max;     // longest span, elements (a multiple of `lanes`)
  std::uint32_t lanes;        // lanes per writer: 32 on the GPU, 1 on the CPU target
  std::uint32_t ops;          // ops per writer
  std::uint32_t flush_at;     // writer 0 calls the device flush() before this op (ops: never)
};

enum class rw_kind : unsigned { store, write_span, read, read_span };

// One op of one writer: the same for every lane of the writer.
struct rw_op {
  rw_kind kind;
  std::uint64_t chunk;
  std::uint64_t first;  // spans: first element
  std::uint32_t n;      // spans: elements
  std::uint64_t h;      // the op's hash, for the lanes' own choices
};

WARPSTORE_HD inline std::uint64_t rw_mix(std::uint64_t x) {
  return warpstore::detail::mix64(x + warpstore::detail::golden_gamma);
}

WARPSTORE_HD inline std::uint64_t rw_hash(std::uint64_t a, std::uint64_t b, std::uint64_t c,
                                          std::uint64_t d) {
  return rw_mix(rw_mix(rw_mix(rw_mix(a) ^ b) ^ c) ^ d);
}

// Group of chunk c in round `round`: writer g < writers owns it, g >= writers: frozen.
WARPSTORE_HD inline std::uint64_t rw_group_of(const rw_round& r, std::uint64_t chunk) {
  return (chunk + r.round * 7) % r.groups;
}

// The pick-th (mod count) chunk of group g in this round.
WARPSTORE_HD inline std::uint64_t rw_chunk_of_group(const rw_round& r, std::uint64_t g,
                                                    std::uint64_t pick) {
  const std::uint64_t shift = (r.round * 7) % r.groups;
  const std::uint64_t base = (g + r.groups - shift) % r.groups;  // chunk ≡ base (mod groups)
  const std::uint64_t count = (r.chunks - base + r.groups - 1) / r.groups;
  return base + r.groups * (pick % count);
}

WARPSTORE_HD inline rw_op rw_plan(const rw_round& r, std::uint64_t writer, std::uint32_t k) {
  rw_op op{};
  op.h = rw_hash(r.seed, r.round, writer, k);
  const unsigned roll = static_cast<unsigned>(op.h % 20);
  // 30 % stores, 15 % span writes, 35 % reads, 20 % span reads.
  op.kind = roll < 6    ? rw_kind::store
            : roll < 9  ? rw_kind::write_span
            : roll < 16 ? rw_kind::read
                        : rw_kind::read_span;
  const bool is_read = op.kind == rw_kind::read || op.kind == rw_kind::read_span;
  // Half the reads go to frozen chunks, which any writer may read.
  const bool frozen = is_read && ((op.h >> 8) & 1) != 0 && r.groups > r.writers;
  const std::uint64_t g = frozen ? r.writers + (op.h >> 16) % (r.groups - r.writers) : writer;
  op.chunk = rw_chunk_of_group(r, g, op.h >> 24);
  const std::uint32_t units = r.chunk_elems / r.lanes;   // lane-aligned starts in a chunk
  const std::uint32_t units_max = r.span_max / r.lanes;  // longest span in lane units
  std::uint32_t u0, nu;
  if (((op.h >> 60) & 1) != 0) {
    // From the chunk's start, as long as allowed: with chunks of whole
    // lines this writes (or reads) lines whole.
    u0 = 0;
    nu = units < units_max ? units : units_max;
  } else {
    u0 = static_cast<std::uint32_t>((op.h >> 40) % units);
    const std::uint32_t left = units - u0;
    const std::uint32_t cap = left < units_max ? left : units_max;
    nu = 1 + static_cast<std::uint32_t>((op.h >> 50) % cap);
  }
  op.first = op.chunk * r.chunk_elems + std::uint64_t{u0} * r.lanes;
  op.n = nu * r.lanes;
  return op;
}

// The element lane `lane` stores or reads in a single-element op: in the
// writer's own chunks only elements ≡ lane (mod lanes); in frozen chunks any.
WARPSTORE_HD inline std::uint64_t rw_element(const rw_round& r, const rw_op& op, unsigned lane) {
  const std::uint64_t h = rw_mix(op.h ^ (0x5151ull + lane));
  if (op.kind == rw_kind::read && rw_group_of(r, op.chunk) >= r.writers)
    return op.chunk * r.chunk_elems + h % r.chunk_elems;
  return op.chunk * r.chunk_elems + (h % (r.chunk_elems / r.lanes)) * r.lanes + lane;
}

WARPSTORE_HD inline std::uint64_t rw_store_value(const rw_op& op, unsigned lane) {
  return rw_hash(op.h, lane, 1, 0x57u);
}

WARPSTORE_HD inline std::uint64_t rw_span_value(const rw_op& op, std::uint32_t j) {
  return rw_hash(op.h, j, 2, 0x5au);
}

WARPSTORE_HD inline unsigned rw_bytes_differing(std::uint64_t got, std::uint64_t want) {
  const std::uint64_t d = got ^ want;
  unsigned n = 0;
  for (unsigned b = 0; b < 8; ++b) n += ((d >> (8 * b)) & 0xFFu) != 0;
  return n;
}

// Every lane of writer `writer` calls this (all 32 lanes of a warp on the
// GPU, converged; one thread on the CPU target).
WARPSTORE_HD inline void rw_writer(const rw_round& r, std::uint64_t writer) {
  const unsigned lane = detail::warp::lane();
  const unsigned mask = detail::warp::active_mask();
  unsigned long long c[rw_counters] = {};
  std::uint64_t* scratch = r.scratch + writer * r.span_max;
  const auto check = [&](std::uint64_t got, std::uint64_t want) {
    const unsigned bad = rw_bytes_differing(got, want);
    c[rw_checked_bytes] += 8;
    c[rw_wrong_bytes] += bad;
    c[rw_wrong_words] += bad != 0;
  };
  for (std::uint32_t k = 0; k < r.ops; ++k) {
    if (writer == 0 && k == r.flush_at) {
      // A device flush while the other writers keep writing.
      const bool ok = r.a.flush();
      c[rw_device_flushes] += lane == 0;
      c[rw_failed_flushes] += lane == 0 && !ok;
    }
    const rw_op op = rw_plan(r, writer, k);
    switch (op.kind) {
      case rw_kind::store: {
        const std::uint64_t e = rw_element(r, op, lane);
        const std::uint64_t v = rw_store_value(op, lane);
        r.a.store(e, v);
        r.model[e] = v;
        ++c[rw_stores];
        break;
      }
      case rw_kind::write_span: {
        for (std::uint32_t j = lane; j < op.n; j += r.lanes) scratch[j] = rw_span_value(op, j);
        detail::warp::sync(mask);
        const bool ok = r.a.write_span(op.first, op.n, scratch);
        // A failed span leaves the lines it did not reach as they were: the
        // model cannot know which, so a failure fails the soak (failed_ops).
        for (std::uint32_t j = lane; j < op.n; j += r.lanes) r.model[op.first + j] = scratch[j];
        c[rw_span_writes] += lane == 0;
        c[rw_failed_ops] += lane == 0 && !ok;
        detail::warp::sync(mask);  // scratch is reused by the next op
        break;
      }
      case rw_kind::read: {
        const std::uint64_t e = rw_element(r, op, lane);
        check(r.a[e], r.model[e]);
        ++c[rw_reads];
        break;
      }
      case rw_kind::read_span: {
        const bool ok = r.a.read_span(op.first, op.n, scratch);
        detail::warp::sync(mask);
        for (std::uint32_t j = lane; j < op.n; j += r.lanes)
          check(scratch[j], r.model[op.first + j]);
        c[rw_span_reads] += lane == 0;
        c[rw_failed_ops] += lane == 0 && !ok;
        detail::warp::sync(mask);
        break;
      }
    }
  }
  for (unsigned i = 0; i < rw_counters; ++i)
    if (c[i] != 0)
      detail::device_atomic<unsigned long long>(r.counters[i])
          .fetch_add(c[i], detail::memory_order_relaxed);
}

// The host's replay of one writer's writes of a round into `model`.
inline void rw_replay(const rw_round& r, std::uint64_t writer, std::uint64_t* model) {
  for (std::uint32_t k = 0; k < r.ops; ++k) {
    const rw_op op = rw_plan(r, writer, k);
    if (op.kind == rw_kind::store) {
      for (unsigned lane = 0; lane < r.lanes; ++lane)
        model[rw_element(r, op, lane)] = rw_store_value(op, lane);
    } else if (op.kind == rw_kind::write_span) {
      for (std::uint32_t j = 0; j < op.n; ++j) model[op.first + j] = rw_span_value(op, j);
    }
  }
}

}  // namespace warpstore::reliability
