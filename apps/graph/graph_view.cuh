// How graph kernels reach a CSR graph: the same kernels run over a plain
// pointer view (the graph in GPU memory, in pinned host memory read
// zero-copy, or in unified memory) and over warpstore arrays (the file behind
// a cache). Both views offer the same two warp-level operations:
//
//   offset(v)                       first edge of v (collective over the calling lanes)
//   for_each_edge(mask, b, e, f)    the lanes of `mask` call f(k, neighbour, weight)
//                                   for every edge k in [b, e), each edge once
//   for_each_lower(mask, b, e, limit, f)
//                                   f(k, neighbour) for the edges of [b, e) whose
//                                   neighbour is below `limit`: the prefix of the
//                                   sorted list (csr.h), read no further than it
//                                   reaches (weights not read)
#pragma once

#include <cstdint>

#include "warpstore/array.cuh"
#include "warpstore/detail/platform.cuh"

namespace warpstore::apps {

// The graph wherever a plain pointer reaches it.
struct plain_graph {
  std::uint64_t vertices = 0;
  const std::uint64_t* offsets = nullptr;
  const std::uint32_t* neighbours = nullptr;
  const float* weights = nullptr;  // null: every weight is 1

  WARPSTORE_HD std::uint64_t offset(std::uint64_t v) const { return offsets[v]; }

  template <class F>
  WARPSTORE_HD bool for_each_edge(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    for (std::uint64_t k = b + detail::warp::rank_in(mask, detail::warp::lane()); k < e; k += lanes)
      f(k, neighbours[k], weights != nullptr ? weights[k] : 1.0f);
    return true;
  }

  template <class F>
  WARPSTORE_HD bool for_each_lower(unsigned mask, std::uint64_t b, std::uint64_t e,
                                   std::uint64_t limit, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    for (std::uint64_t k = b + detail::warp::rank_in(mask, detail::warp::lane()); k < e;
         k += lanes) {
      const std::uint32_t u = neighbours[k];
      if (u >= limit) break;  // sorted: the rest of this lane's edges are higher
      f(k, u);
    }
    return true;
  }
};

// The graph behind warpstore arrays. A warp walks an adjacency list one
// cache line at a time: all its lanes pin the line together (one lookup),
// read their share of it with no atomics, and give it back with one atomic.
// A warp never waits for a line while it holds one: weights are copied to
// registers and their line released before the neighbours' line is pinned,
// so no set of the cache can fill with lines whose holders wait on each other.
struct store_graph {
  static constexpr unsigned weights_per_lane = 32;

  std::uint64_t vertices = 0;
  array_ref<std::uint64_t> offsets;
  array_ref<std::uint32_t> neighbours;
  array_ref<float> weights;
  bool weighted = false;

  WARPSTORE_HD std::uint64_t offset(std::uint64_t v) const { return offsets[v]; }

  // False when a line could not be read (the error is recorded for check()).
  template <class F>
  WARPSTORE_HD bool for_each_edge(unsigned mask, std::uint64_t b, std::uint64_t e, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    std::uint64_t i = b;
    while (i < e) {
      std::uint64_t end = e;
      float w[weights_per_lane];
      if (weighted) {
        pinned_line<float> wl = weights.pin(i);
        if (!wl.valid()) return false;
        if (wl.first + wl.count < end) end = wl.first + wl.count;
        if (i + std::uint64_t{weights_per_lane} * lanes < end) end = i + std::uint64_t{weights_per_lane} * lanes;
        unsigned j = 0;
        for (std::uint64_t k = i + rank; k < end; k += lanes) w[j++] = wl[k];
        wl.release_together(mask);
      }
      pinned_line<std::uint32_t> n = neighbours.pin(i);
      if (!n.valid()) return false;
      if (n.first + n.count < end) end = n.first + n.count;
      unsigned j = 0;
      for (std::uint64_t k = i + rank; k < end; k += lanes, ++j) f(k, n[k], weighted ? w[j] : 1.0f);
      n.release_together(mask);
      i = end;
    }
    return true;
  }

  // The lines past the one where the sorted list reaches `limit` are not read.
  template <class F>
  WARPSTORE_HD bool for_each_lower(unsigned mask, std::uint64_t b, std::uint64_t e,
                                   std::uint64_t limit, F&& f) const {
    const unsigned lanes = detail::warp::popcount(mask);
    const unsigned rank = detail::warp::rank_in(mask, detail::warp::lane());
    for (std::uint64_t i = b; i < e;) {
      pinned_line<std::uint32_t> n = neighbours.pin(i);
      if (!n.valid()) return false;
      const std::uint64_t end = n.first + n.count < e ? n.first + n.count : e;
      for (std::uint64_t k = i + rank; k < end; k += lanes) {
        const std::uint32_t u = n[k];
        if (u < limit) f(k, u);
      }
      const bool more = n[end - 1] < limit;  // the same answer in every lane
      n.release_together(mask);
      if (!more) break;
      i = end;
    }
    return true;
  }
};

// Warp per vertex: the warp takes warp::size consecutive vertices at a time;
// each lane reads the offsets of its vertex (one line lookup for all lanes
// together), then the whole warp walks the edges of every vertex for which
// want(v) holds, calling visit(mask, v, first_edge, end_edge) collectively.
// `warp` and `warps` number the warps of the launch (lanes on the CPU target).
template <class G, class Want, class Visit>
WARPSTORE_HD void for_vertices(const G& g, std::uint64_t warp, std::uint64_t warps, Want&& want,
                               Visit&& visit) {
  const unsigned size = detail::warp::size;
  const unsigned mask = detail::warp::active_mask();
  const unsigned lane = detail::warp::lane();
  for (std::uint64_t base = warp * size; base < g.vertices; base += warps * size) {
    const std::uint64_t v = base + lane;
    const bool mine = v < g.vertices && want(v);
    unsigned todo = detail::warp::ballot(mask, mine);
    if (todo == 0) continue;
    const std::uint64_t at = v < g.vertices ? v : g.vertices - 1;
    const std::uint64_t b = g.offset(at);
    const std::uint64_t e = g.offset(at + 1);
    while (todo != 0) {
      const unsigned j = detail::warp::first_lane(todo);
      todo &= todo - 1;
      visit(mask, base + j, detail::warp::shfl(mask, b, j), detail::warp::shfl(mask, e, j));
    }
  }
}


}  // namespace warpstore::apps
