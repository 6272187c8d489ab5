// Queries Q0..Q5 of the columnar study (tools/taxi/taxi.h) as one warp-level
// body, over plain column pointers (the full-load baseline) or warpstore
// arrays. A warp scans the distance column a line at a time (pinned, no
// atomics per element); only lanes whose trip is over the threshold read the
// further columns, element by element, so a column's line is fetched only
// if one of its trips is selected. Sums are exact integers (taxi.h).
#pragma once

#include <cstdint>

#include "apps/graph/graph_view.cuh"
#include "tools/taxi/taxi.h"
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
};

struct store_column {
  array_ref<float> data;

  WARPSTORE_HD float get(std::uint64_t i) const { return data[i]; }
  template <class F>
  WARPSTORE_HD bool scan(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    for (std::uint64_t i = b; i < e;) {
      pinned_line<float> p = data.pin(i);
      if (!p.valid()) return false;
      const std::uint64_t end = p.first + p.count < e ? p.first + p.count : e;
      for (std::uint64_t k = i + rank; k < end; k += lanes) f(k, p[k]);
      p.release_together(mask);
      i = end;
    }
    return true;
  }
};

// sums[0..2]: taxi::answer's count, sum_distance, sum_ratio (exact integer
// sums of the per-row terms of tools/taxi/taxi.h, the CPU reference's code);
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

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned mask = detail::warp::active_mask();
    std::uint64_t count = 0, sum_distance = 0, sum_ratio = 0, failed = 0;
    for (std::uint64_t b = warp * chunk; b < rows; b += warps * chunk) {
      const std::uint64_t e = b + chunk < rows ? b + chunk : rows;
      const bool ok = cols[0].scan(mask, b, e, [&](std::uint64_t i, float d) {
        if (!(d > threshold)) return;
        count += 1;
        sum_distance += taxi::distance_term(d);
        if (k == 0) return;
        double s = 0;
        for (unsigned c = 1; c <= k; ++c) s = taxi::add_rn(s, cols[c].get(i));
        sum_ratio += taxi::ratio_term(s, d);
      });
      failed += ok ? 0 : 1;
    }
    count = warp_sum(mask, count);
    sum_distance = warp_sum(mask, sum_distance);
    sum_ratio = warp_sum(mask, sum_ratio);
    failed = warp_sum(mask, failed);
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
