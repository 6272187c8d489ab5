// The write path of array_ref<T>: stores and spans written into the cache,
// eager write-back, the device flush. Part of detail/array_ref.cuh.
#pragma once

#include <cstdint>

#include "warpstore/detail/array_ref.cuh"
#include "warpstore/detail/line_io.cuh"
#include "warpstore/detail/platform.cuh"

namespace warpstore {

template <class T>
WARPSTORE_HD void array_ref<T>::store(std::uint64_t i, const T& v) const {
  const unsigned mask = calling_mask();
  if (!check_writable(i)) return;
  const bool in_range = check_index(i);
  with_line<false, true>(mask, in_range, line_of(i), i,
                         [&](std::uint32_t slot) { *element_in(slot, i) = v; });
}

template <class T>
WARPSTORE_HD bool array_ref<T>::write_span(std::uint64_t first, std::uint64_t n,
                                           const T* in) const {
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

template <class T>
WARPSTORE_HD bool array_ref<T>::flush() const {
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

}  // namespace warpstore
