// The read path of array_ref<T>: element reads, pins and spans read
// through the cache. Part of detail/array_ref.cuh.
#pragma once

#include <cstdint>

#include "warpstore/cache.cuh"
#include "warpstore/detail/array_ref.cuh"
#include "warpstore/detail/platform.cuh"
#include "warpstore/io.cuh"

namespace warpstore {

template <class T>
WARPSTORE_HD T array_ref<T>::operator[](std::uint64_t i) const {
  return read_masked(calling_mask(), true, i);
}

template <class T>
WARPSTORE_HD T array_ref<T>::read_masked(unsigned mask, bool want, std::uint64_t i) const {
  const bool in_range = want && check_index(i);
  T v{};
  with_line<false>(
      mask, in_range, line_of(i), i, [&](std::uint32_t slot) { v = *element_in(slot, i); }, false,
      [&](const std::byte* bytes) { v = *element_at(bytes, i); });
  return v;
}

template <class T>
WARPSTORE_HD pinned_line<T> array_ref<T>::pin(std::uint64_t i) const {
  const unsigned mask = calling_mask();
  const bool in_range = check_index(i);
  const std::uint64_t line = line_of(i);
  const detail::line_grant g = with_line<true>(mask, in_range, line, i, [](std::uint32_t) {});
  pinned_line<T> p;
  if (g.ok) {
    p.first = line << elems_per_line_log2;
    p.count = static_cast<std::uint32_t>(count - p.first < (1ull << elems_per_line_log2)
                                             ? count - p.first
                                             : (1ull << elems_per_line_log2));
    p.data = reinterpret_cast<const T*>(cache.line_data(g.slot));
    p.state = cache.states + g.slot;
  }
  // The leader took one pin per lane of its group; each lane gives its own
  // back. A failed fill hands nothing out, so the leader returns them all.
  if (!g.ok && g.pins != 0) cache.release(g.slot, g.pins);
  return p;
}

template <class T>
WARPSTORE_HD bool array_ref<T>::read_span(std::uint64_t first, std::uint64_t n, T* out) const {
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
    // Element i onwards of its line, from the cache or (read around) host memory.
    auto copy_from = [&](const T* src) {
      for (std::uint64_t k = rank; k < take; k += lanes) out[done + k] = src[k];
    };
    const detail::line_grant g = with_line<false>(
        mask, true, line, i, [&](std::uint32_t slot) { copy_from(element_in(slot, i)); }, false,
        [&](const std::byte* bytes) { copy_from(element_at(bytes, i)); });
    all_ok = all_ok && g.ok;
    done += take;
  }
  return all_ok;
}

template <class T>
WARPSTORE_HD bool array_ref<T>::read_in_line(unsigned mask, bool want, std::uint64_t first,
                                             std::uint64_t n, T* out, unsigned stride,
                                             unsigned offset) const {
  const bool in_range = want && n != 0 && check_index(first) && check_index(first + n - 1);
  auto copy_from = [&](const T* src) { detail::copy_strided(src, out, n, stride, offset); };
  const detail::line_grant g = with_line<false>(
      mask, in_range, line_of(first), first,
      [&](std::uint32_t slot) { copy_from(element_in(slot, first)); }, false,
      [&](const std::byte* bytes) { copy_from(element_at(bytes, first)); });
  return !want || (in_range && g.ok);
}

template <class T>
WARPSTORE_HD const T* array_ref<T>::passed_element(unsigned mask, std::uint64_t i) const {
  if (admit_misses <= 1 || !reads_around()) return nullptr;
  const std::uint64_t line = line_of(i);
  const std::uint64_t k = cache_ref::key(source, line);
  const unsigned leader = detail::warp::first_lane(detail::warp::match_any(mask, k));
  std::uint64_t at = 0;  // the line's bytes in host memory; 0: through the cache
  if (detail::warp::lane() == leader && !admits(line)) {
    const io_request req = lines().request_for(line, 0);
    if (memory_source_ref::check_range(req, io.memory.capacity_blocks).success() &&
        cache.find_slot(k) == cache.num_lines) {
      cache.count(&cache_counters::read_around);
      at = reinterpret_cast<std::uint64_t>(io.memory.data + (req.slba << nvme::block_shift));
    }
  }
  at = detail::warp::shfl(mask, at, leader);
  return at != 0 ? element_at(reinterpret_cast<const std::byte*>(at), i) : nullptr;
}

}  // namespace warpstore
