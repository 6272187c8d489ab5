// The gather bodies of the Python extension, written once for both targets:
// nvcc compiles them into kernels (gather_gpu.cu), the host compiler into
// std::thread lanes (gather_cpu.cpp). Elements are type-erased to words of
// their size; a row of an [N, D] array is a span of words, read by one warp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gather.h"
#include "warpstore/array.cuh"

namespace warpstore::python {

// An element (or a piece of a row) of N bytes: what a dtype is to the cache.
template <std::size_t N>
struct alignas(N) word {
  unsigned char bytes[N];
};

// Calls f.template operator()<word<N>>() for n in {1, 2, 4, 8, 16}.
template <class F>
decltype(auto) with_word(std::size_t n, F&& f) {
  switch (n) {
    case 1: return f.template operator()<word<1>>();
    case 2: return f.template operator()<word<2>>();
    case 4: return f.template operator()<word<4>>();
    case 8: return f.template operator()<word<8>>();
    default: return f.template operator()<word<16>>();
  }
}

// The positions of a batch whose index is out of range: the smallest one is
// what the host reports. Starts at no_bad_position.
inline constexpr std::uint64_t no_bad_position = ~std::uint64_t{0};

// The record a call starts from: no error, no bad position, not cancelled.
WARPSTORE_HD inline call_record fresh_call_record() {
  call_record r{};
  r.first_bad = no_bad_position;
  return r;
}

// NumPy's rule: a negative index counts from the end.
template <class I>
WARPSTORE_HD bool resolve_index(I raw, std::uint64_t n, std::uint64_t& i) {
  if constexpr (std::is_signed_v<I>) {
    const std::int64_t v = static_cast<std::int64_t>(raw);
    if (v < 0) {
      if (static_cast<std::uint64_t>(-(v + 1)) >= n) return false;
      i = n - static_cast<std::uint64_t>(-(v + 1)) - 1;
      return true;
    }
  }
  i = static_cast<std::uint64_t>(raw);
  return i < n;
}

WARPSTORE_HD inline void note_bad_position(std::uint64_t* first_bad, std::uint64_t k) {
  detail::device_atomic<std::uint64_t>(*first_bad).fetch_min(k, detail::memory_order_relaxed);
}

// Whether the call was cancelled, the same answer for every lane of `mask`
// (lanes that then skip a warp-collective read must all skip it).
WARPSTORE_HD inline bool cancelled_for(unsigned mask, std::uint32_t* cancel) {
  const bool mine = detail::device_atomic<std::uint32_t>(*cancel).load(detail::memory_order_relaxed) != 0;
  return detail::warp::ballot(mask, mine) != 0;
}

// Row r (in range), `row_words` words, to dst by the calling lanes (a warp
// on the GPU), one line's piece at a time: a piece whose miss the cache
// does not admit comes straight from host memory, its bytes alone; any
// other through the cache (read_span). A row that spans lines (rows that
// are not a power of two: 400 B rows of 100 float32 in 512 B lines cross
// one line's end three times in four) reads each line's piece that way, so
// a missed row costs its own bytes over the link, not two lines.
template <class W>
WARPSTORE_HD void read_row(const array_ref<W>& a, std::uint64_t r, std::uint64_t row_words,
                           W* dst) {
  std::uint64_t first = r * row_words;
  if (a.admit_misses <= 1) {
    a.read_span(first, row_words, dst);
    return;
  }
  const std::uint64_t per_line = std::uint64_t{1} << a.elems_per_line_log2;
  const unsigned mask = detail::warp::active_mask();
  const unsigned lanes = detail::warp::popcount(mask);
  const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
  while (row_words != 0) {
    const std::uint64_t room = per_line - (first & (per_line - 1));
    const std::uint64_t piece = row_words < room ? row_words : room;
    if (const W* src = a.passed_element(mask, first))
      detail::copy_strided(src, dst, piece, lanes, rank);
    else
      a.read_span(first, piece, dst);
    first += piece;
    dst += piece;
    row_words -= piece;
  }
}

// read_row for several rows a warp (small rows, see row_group_lanes): row
// r by `stride` lanes of `mask`, this one `offset` among them. Every lane
// of `mask` calls together; lanes without `want` take part in the
// collectives only. Each line's piece through the cache (read_in_line):
// lanes whose rows share a line share its lookup and fill. No miss
// admission: only gathers that admit none read rows this way
// (gather_kernels.cuh, lanes_per_row; the CPU target admits none).
template <class W>
WARPSTORE_HD void read_row_lanes(const array_ref<W>& a, unsigned mask, bool want,
                                 std::uint64_t r, std::uint64_t row_words, W* dst,
                                 unsigned stride, unsigned offset) {
  const std::uint64_t per_line = std::uint64_t{1} << a.elems_per_line_log2;
  std::uint64_t first = r * row_words;
  std::uint64_t left = want ? row_words : 0;
  while (detail::warp::ballot(mask, left != 0) != 0) {
    const std::uint64_t room = per_line - (first & (per_line - 1));
    const std::uint64_t piece = left < room ? left : room;
    a.read_in_line(mask, left != 0, first, piece, dst, stride, offset);
    first += piece;
    dst += piece;
    left -= piece;
  }
}

// The fewest lanes that read one row together on the GPU: each reads at
// most four of its words, so a warp can read 32 / lanes small rows at once
// (128 B rows: 16, each lane a quarter of one). A row's lookup is a chain of
// dependent loads and atomics in L2, and a warp that read one row at a time
// waited on one chain after another: a 64 K-row gather of 128 B rows that
// hit every line took 215 us on an H100, where torch's index_select on GPU
// memory takes 41 (gather_kernels.cuh, lanes_per_row, picks per gather).
// Rows over 16 words (256 B of 16-byte words) keep a warp each: at 512 B
// four rows a warp ran no faster than one.
WARPSTORE_HD inline unsigned row_group_lanes(std::uint64_t row_words) {
  if (row_words > 16) return 32;
  unsigned g = 1;
  while (std::uint64_t{4} * g < row_words) g *= 2;
  return g;
}

// Position k of a 1-D gather: out[k] = a[idx[k]]. Any subset of a warp's
// lanes may call together (lanes of one line share its lookup). `a.errors`
// is the call's own error record.
template <class W, class I>
WARPSTORE_HD void gather_element(const array_ref<W>& a, const I* idx, W* out, std::uint64_t k,
                                 std::uint64_t* first_bad, std::uint32_t* cancel) {
  if (cancelled_for(detail::warp::active_mask(), cancel)) return;
  std::uint64_t i = 0;
  if (!resolve_index(idx[k], a.size(), i)) {
    note_bad_position(first_bad, k);
    out[k] = W{};
    return;
  }
  out[k] = a[i];
}

// Position k of a row gather: the calling lanes (a whole warp on the GPU)
// copy row idx[k], `row_words` words, to out row k.
template <class W, class I>
WARPSTORE_HD void gather_row(const array_ref<W>& a, std::uint64_t rows, std::uint64_t row_words,
                             const I* idx, W* out, std::uint64_t k, std::uint64_t* first_bad,
                             std::uint32_t* cancel) {
  const unsigned mask = detail::warp::active_mask();
  if (cancelled_for(mask, cancel)) return;
  std::uint64_t r = 0;
  if (!resolve_index(idx[k], rows, r)) {
    if (detail::warp::lane() == detail::warp::first_lane(mask)) note_bad_position(first_bad, k);
    return;  // the host raises before anyone sees the row
  }
  read_row(a, r, row_words, out + k * row_words);
}

// gather_row for several rows a warp (read_row_lanes): `stride` lanes of
// `mask` (this one `offset` among them; one lane on the CPU) copy row
// idx[k]. Every lane of `mask` calls together; lanes without `want` take
// part in the collectives only.
template <class W, class I>
WARPSTORE_HD void gather_row_lanes(const array_ref<W>& a, unsigned mask, bool want,
                                   std::uint64_t rows, std::uint64_t row_words, const I* idx,
                                   W* out, std::uint64_t k, std::uint64_t* first_bad,
                                   std::uint32_t* cancel, unsigned stride, unsigned offset) {
  if (cancelled_for(mask, cancel)) return;
  std::uint64_t r = 0;
  if (want && !resolve_index(idx[k], rows, r)) {
    if (offset == 0) note_bad_position(first_bad, k);
    want = false;  // the host raises before anyone sees the row
  }
  read_row_lanes(a, mask, want, r, row_words, want ? out + k * row_words : out, stride, offset);
}

}  // namespace warpstore::python
