// Queries Q0..Q5 of the columnar study (support/taxi/taxi.h) as one warp-level
// body, over plain column pointers (the full-load baseline) or warpstore
// arrays. A warp scans the distance column a line at a time (pinned, no
// atomics per element); only lanes whose trip is over the threshold read the
// further columns, element by element, so a column's line is fetched only
// if one of its trips is selected. Sums are exact integers (taxi.h).
#pragma once

#include <cstdint>

#include "apps/graph/graph_view.cuh"
#include "support/taxi/taxi.h"
#include "warpstore/array.cuh"

namespace warpstore::apps {

struct plain_column {
  const float* data = nullptr;

  WARPSTORE_HD float get(std::uint64_t i) const { return data[i]; }
  template <class F>
  WARPSTORE_HD bool scan(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    for (std::uint64_t i = b + detail::warp::rank_in(mask, detail::warp::lane()); i < e; i += lanes)
      f(i, data[i]);
    return true;
  }
  // Every lane of `mask` calls f(in, i, d) the same number of times; lanes
  // past the end get in = false (the converged further read needs them).
  template <class F>
  WARPSTORE_HD bool scan_converged(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    for (std::uint64_t i0 = b; i0 < e; i0 += lanes) {
      const std::uint64_t i = i0 + rank;
      f(i < e, i, i < e ? data[i] : 0.0f);
    }
    return true;
  }
  WARPSTORE_HD float get_if(unsigned, bool want, std::uint64_t i) const {
    return want ? data[i] : 0.0f;
  }
};

struct store_column {
  array_ref<float> data;

  WARPSTORE_HD float get(std::uint64_t i) const { return data[i]; }
  template <class F>
  WARPSTORE_HD bool scan(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    return walk_lines(mask, b, e, [&](const pinned_line<float>& p, std::uint64_t i, std::uint64_t end) {
      for (std::uint64_t k = i + rank; k < end; k += lanes) f(k, p[k]);
    });
  }
  // scan, but every lane of `mask` calls f(in, i, d) the same number of
  // times per line (in = false past the line's end), so the callback may
  // make warp-collective calls over `mask`.
  template <class F>
  WARPSTORE_HD bool scan_converged(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    return walk_lines(mask, b, e, [&](const pinned_line<float>& p, std::uint64_t i, std::uint64_t end) {
      for (std::uint64_t k0 = i; k0 < end; k0 += lanes) {
        const std::uint64_t k = k0 + rank;
        f(k < end, k, k < end ? p[k] : 0.0f);
      }
    });
  }
  // The warp pins each line of rows [b, e) in turn and calls
  // visit(line, first, end) for its rows [first, end) before unpinning it.
  template <class V>
  WARPSTORE_HD bool walk_lines(unsigned mask, std::uint64_t b, std::uint64_t e, V&& visit) const {
    for (std::uint64_t i = b; i < e;) {
      pinned_line<float> p = data.pin(i);
      if (!p.valid()) return false;
      const std::uint64_t end = p.first + p.count < e ? p.first + p.count : e;
      visit(p, i, end);
      p.release_together(mask);
      i = end;
    }
    return true;
  }
  // All lanes of `mask` call; lanes with `want` read element i.
  WARPSTORE_HD float get_if(unsigned mask, bool want, std::uint64_t i) const {
    return data.read_masked(mask, want, i);
  }
};

// How the selected trips read their further columns (warpstore-taxi
// --further-read; the variants isolated a wrong-answer bug, see
// array_ref::calling_mask).
enum class further_read : unsigned {
  divergent,  // operator[] by the selected lanes only, inside the scan callback
              // (mask from __activemask()), the column-0 line still pinned
  converged,  // every lane of the warp calls read_masked(mask, selected, i)
  released,   // the selected rows of a slice collected first, the column-0
              // line unpinned, then operator[] by each lane for its rows
};

// Rows of one slice in `released` mode: at most release_slice_per_lane per
// lane plus one per line crossed, within release_capacity.
inline constexpr unsigned release_slice_per_lane = 16;
inline constexpr unsigned release_capacity = 48;

// sums[0..2]: taxi::answer's count, sum_distance, sum_ratio (exact integer
// sums of the per-row terms of support/taxi/taxi.h, the CPU reference's code);
// sums[3]: chunks whose distance lines could not be read (their errors are
// in the arrays' error records).
inline constexpr unsigned query_sums = 4;

template <class Column>
struct taxi_query {
  Column cols[6];
  unsigned k;  // further columns read for selected trips
  float threshold;
  std::uint64_t rows;
  std::uint64_t chunk;  // rows a warp takes at a time
  std::uint64_t* sums;
  further_read mode = further_read::divergent;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned mask = detail::warp::active_mask();
    std::uint64_t count = 0, sum_distance = 0, sum_ratio = 0, failed = 0;
    // One selected trip: the terms of taxi::cpu_query.
    auto select = [&](std::uint64_t i, float d) {
      count += 1;
      sum_distance += taxi::distance_term(d);
      if (k == 0) return;
      double s = 0;
      for (unsigned c = 1; c <= k; ++c) s = taxi::add_rn(s, cols[c].get(i));
      sum_ratio += taxi::ratio_term(s, d);
    };
    for (std::uint64_t b = warp * chunk; b < rows; b += warps * chunk) {
      const std::uint64_t e = b + chunk < rows ? b + chunk : rows;
      bool ok = true;
      if (mode == further_read::divergent) {
        ok = cols[0].scan(mask, b, e, [&](std::uint64_t i, float d) {
          if (d > threshold) select(i, d);
        });
      } else if (mode == further_read::converged) {
        ok = cols[0].scan_converged(mask, b, e, [&](bool in, std::uint64_t i, float d) {
          const bool sel = in && d > threshold;
          double s = 0;
          for (unsigned c = 1; c <= k; ++c) s = taxi::add_rn(s, cols[c].get_if(mask, sel, i));
          if (!sel) return;
          count += 1;
          sum_distance += taxi::distance_term(d);
          if (k != 0) sum_ratio += taxi::ratio_term(s, d);
        });
      } else {
        const std::uint64_t slice = release_slice_per_lane * detail::warp::popcount(mask);
        for (std::uint64_t sb = b; sb < e && ok; sb += slice) {
          const std::uint64_t se = sb + slice < e ? sb + slice : e;
          std::uint64_t picked[release_capacity];
          float dist[release_capacity];
          unsigned n = 0;
          bool overflow = false;
          ok = cols[0].scan(mask, sb, se, [&](std::uint64_t i, float d) {
            if (!(d > threshold)) return;
            if (n == release_capacity) {
              overflow = true;
              return;
            }
            picked[n] = i;
            dist[n] = d;
            ++n;
          });
          // The column-0 pins are given back here; now the further reads.
          for (unsigned j = 0; j < n; ++j) select(picked[j], dist[j]);
          ok = ok && !overflow;  // loud (a failed chunk), never a silent miss
        }
      }
      failed += ok ? 0 : 1;
    }
    count = detail::warp::sum(mask, count);
    sum_distance = detail::warp::sum(mask, sum_distance);
    sum_ratio = detail::warp::sum(mask, sum_ratio);
    failed = detail::warp::sum(mask, failed);
    if (detail::warp::lane() == 0) {
      using counter = detail::device_atomic<std::uint64_t>;
      counter(sums[0]).fetch_add(count, detail::memory_order_relaxed);
      counter(sums[1]).fetch_add(sum_distance, detail::memory_order_relaxed);
      counter(sums[2]).fetch_add(sum_ratio, detail::memory_order_relaxed);
      if (failed) counter(sums[3]).fetch_add(failed, detail::memory_order_relaxed);
    }
  }
};

}  // namespace warpstore::apps
