// BFS, connected components, PageRank and SSSP over any graph view
// (graph_view.cuh), written once for the GPU and the CPU target. Each
// algorithm is a few warp-per-vertex passes (bodies below) driven from the
// host by run_*; `Launch` runs a body over every warp of a launch and waits:
//
//   launch(body)   calls body(warp, warps) on every warp, then synchronizes
//
// State arrays (levels, parents, ranks, distances) live in device memory;
// only the graph goes through the view.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "apps/graph/graph_view.cuh"
#include "warpstore/runtime.h"

namespace warpstore::apps {

inline constexpr std::uint32_t unreached = 0xffffffffu;

namespace detail_alg {

template <class T>
WARPSTORE_HD T load(T& x) {
  return detail::device_atomic<T>(x).load(detail::memory_order_relaxed);
}
template <class T>
WARPSTORE_HD void store(T& x, T v) {
  detail::device_atomic<T>(x).store(v, detail::memory_order_relaxed);
}
template <class T>
WARPSTORE_HD bool cas(T& x, T expected, T desired) {
  return detail::device_atomic<T>(x).compare_exchange_strong(expected, desired,
                                                             detail::memory_order_relaxed);
}

// Non-negative floats order like their bit patterns.
WARPSTORE_HD inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
WARPSTORE_HD inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace detail_alg

// One BFS level: every vertex at level `cur` marks its unreached neighbours cur + 1.
template <class G>
struct bfs_level {
  G g;
  std::uint32_t* level;
  std::uint32_t cur;
  std::uint32_t* changed;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    using namespace detail_alg;
    for_vertices(
        g, warp, warps, [&](std::uint64_t v) { return load(level[v]) == cur; },
        [&](unsigned mask, std::uint64_t, std::uint64_t b, std::uint64_t e) {
          g.for_each_edge(mask, b, e, [&](std::uint64_t, std::uint32_t u, float) {
            // Every writer stores the same value: no compare-and-swap needed.
            if (load(level[u]) == unreached) {
              store(level[u], cur + 1);
              store(*changed, 1u);
            }
          });
        });
  }
};

// Lock-free union-find: parents only ever point to smaller ids, so the root
// of each tree, after every edge is united, is the smallest vertex of its
// component.
WARPSTORE_HD inline std::uint32_t find_root(std::uint32_t* parent, std::uint32_t x) {
  using namespace detail_alg;
  while (true) {
    const std::uint32_t p = load(parent[x]);
    if (p == x) return x;
    const std::uint32_t gp = load(parent[p]);
    if (gp != p) cas(parent[x], p, gp);  // path halving
    x = gp;
  }
}

WARPSTORE_HD inline void unite(std::uint32_t* parent, std::uint32_t a, std::uint32_t b) {
  while (true) {
    a = find_root(parent, a);
    b = find_root(parent, b);
    if (a == b) return;
    if (a > b) {
      const std::uint32_t t = a;
      a = b;
      b = t;
    }
    if (detail_alg::cas(parent[b], b, a)) return;  // hook the larger root under the smaller
  }
}

// Connected components of a symmetric graph: every edge (v, u) with u < v
// is united once. With `lower_only` (the default) a warp reads only the
// prefix of v's sorted list that holds those edges (for_each_lower), so each
// undirected edge is read once; otherwise it reads the whole list.
template <class G>
struct cc_unite {
  G g;
  std::uint32_t* parent;
  bool lower_only = true;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    for_vertices(
        g, warp, warps, [](std::uint64_t) { return true; },
        [&](unsigned mask, std::uint64_t v, std::uint64_t b, std::uint64_t e) {
          if (lower_only) {
            g.for_each_lower(mask, b, e, v, [&](std::uint64_t, std::uint32_t u) {
              unite(parent, static_cast<std::uint32_t>(v), u);
            });
            return;
          }
          g.for_each_edge(mask, b, e, [&](std::uint64_t, std::uint32_t u, float) {
            if (u < v) unite(parent, static_cast<std::uint32_t>(v), u);
          });
        });
  }
};

struct cc_flatten {
  std::uint64_t vertices;
  std::uint32_t* parent;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned size = detail::warp::size;
    for (std::uint64_t v = warp * size + detail::warp::lane(); v < vertices; v += warps * size)
      detail_alg::store(parent[v], find_root(parent, static_cast<std::uint32_t>(v)));
  }
};

// PageRank, pull form on a symmetric graph: rank(v) = (1 - d) / n +
// d * sum over neighbours u of contrib(u), contrib(u) = rank(u) / degree(u).
// Mass of vertices without edges is not redistributed (the CPU reference
// does the same).
template <class G>
struct pagerank_init {
  G g;
  float* contrib;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const float r0 = 1.0f / static_cast<float>(g.vertices);
    for_vertices(
        g, warp, warps, [](std::uint64_t) { return true; },
        [&](unsigned, std::uint64_t v, std::uint64_t b, std::uint64_t e) {
          if (detail::warp::lane() == 0) contrib[v] = e > b ? r0 / static_cast<float>(e - b) : 0.0f;
        });
  }
};

template <class G>
struct pagerank_step {
  G g;
  const float* contrib;
  float* next_contrib;
  float* rank;
  float damping;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const float teleport = (1.0f - damping) / static_cast<float>(g.vertices);
    for_vertices(
        g, warp, warps, [](std::uint64_t) { return true; },
        [&](unsigned mask, std::uint64_t v, std::uint64_t b, std::uint64_t e) {
          double sum = 0;
          g.for_each_edge(mask, b, e, [&](std::uint64_t, std::uint32_t u, float) { sum += contrib[u]; });
          sum = detail::warp::sum(mask, sum);
          if (detail::warp::lane() == 0) {
            const float r = teleport + damping * static_cast<float>(sum);
            rank[v] = r;
            next_contrib[v] = e > b ? r / static_cast<float>(e - b) : 0.0f;
          }
        });
  }
};

// SSSP, Bellman-Ford over a frontier: every active vertex relaxes its edges;
// a vertex whose distance dropped is active in the next round. Distances are
// float bit patterns (non-negative floats order like unsigned integers).
template <class G>
struct sssp_round {
  G g;
  std::uint32_t* dist;
  const std::uint32_t* active;
  std::uint32_t* next_active;
  std::uint32_t* changed;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    using namespace detail_alg;
    for_vertices(
        g, warp, warps, [&](std::uint64_t v) { return active[v] != 0; },
        [&](unsigned mask, std::uint64_t v, std::uint64_t b, std::uint64_t e) {
          const float dv = bits_float(load(dist[v]));
          g.for_each_edge(mask, b, e, [&](std::uint64_t, std::uint32_t u, float w) {
            const std::uint32_t nd = float_bits(dv + w);
            std::uint32_t old = load(dist[u]);
            while (nd < old) {
              if (detail::device_atomic<std::uint32_t>(dist[u]).compare_exchange_weak(
                      old, nd, detail::memory_order_relaxed)) {
                store(next_active[u], 1u);
                store(*changed, 1u);
                break;
              }
            }
          });
        });
  }
};

// Host drivers. Each returns the result in host memory; `passes` counts the
// launches that read edges (levels, iterations, rounds).
struct run_stats {
  std::uint32_t passes = 0;
};

namespace detail_alg {

// Runs pass(k) for k = 0, 1, ..., the device flag `changed` cleared before
// each, until a pass leaves it clear; returns how many passes ran.
template <class Pass>
std::uint32_t until_unchanged(std::uint32_t* changed, Pass&& pass) {
  for (std::uint32_t k = 0;; ++k) {
    runtime::memset_device(changed, 0, 4);
    pass(k);
    std::uint32_t c = 0;
    runtime::copy_to_host(&c, changed, 4);
    if (c == 0) return k + 1;
  }
}

// The `n` elements at `p` (device memory), in host memory.
template <class T>
std::vector<T> to_host(const T* p, std::uint64_t n) {
  std::vector<T> out(n);
  runtime::copy_to_host(out.data(), p, n * sizeof(T));
  return out;
}

}  // namespace detail_alg

template <class Launch, class G>
std::vector<std::uint32_t> run_bfs(Launch& launch, const G& g, std::uint32_t source,
                                   run_stats* stats = nullptr) {
  const std::uint64_t n = g.vertices;
  auto level = runtime::make_device<std::uint32_t>(n, false);
  auto changed = runtime::make_device<std::uint32_t>(1);
  runtime::memset_device(level.get(), 0xff, n * 4);
  const std::uint32_t zero = 0;
  runtime::copy_to_device(level.get() + source, &zero, 4);
  const std::uint32_t passes = detail_alg::until_unchanged(changed.get(), [&](std::uint32_t cur) {
    launch(bfs_level<G>{g, level.get(), cur, changed.get()});
  });
  if (stats) stats->passes = passes;
  return detail_alg::to_host(level.get(), n);
}

template <class Launch, class G>
std::vector<std::uint32_t> run_cc(Launch& launch, const G& g, run_stats* stats = nullptr,
                                  bool lower_only = true) {
  const std::uint64_t n = g.vertices;
  std::vector<std::uint32_t> out(n);
  for (std::uint64_t v = 0; v < n; ++v) out[v] = static_cast<std::uint32_t>(v);
  auto parent = runtime::make_device<std::uint32_t>(n, false);
  runtime::copy_to_device(parent.get(), out.data(), n * 4);
  launch(cc_unite<G>{g, parent.get(), lower_only});
  launch(cc_flatten{n, parent.get()});
  if (stats) stats->passes = 1;
  runtime::copy_to_host(out.data(), parent.get(), n * 4);
  return out;
}

template <class Launch, class G>
std::vector<float> run_pagerank(Launch& launch, const G& g, std::uint32_t iterations, float damping,
                                run_stats* stats = nullptr) {
  const std::uint64_t n = g.vertices;
  auto contrib = runtime::make_device<float>(n);
  auto next = runtime::make_device<float>(n);
  auto rank = runtime::make_device<float>(n);
  launch(pagerank_init<G>{g, contrib.get()});
  for (std::uint32_t it = 0; it < iterations; ++it) {
    launch(pagerank_step<G>{g, contrib.get(), next.get(), rank.get(), damping});
    std::swap(contrib, next);
  }
  if (stats) stats->passes = iterations;
  return detail_alg::to_host(rank.get(), n);
}

template <class Launch, class G>
std::vector<float> run_sssp(Launch& launch, const G& g, std::uint32_t source,
                            run_stats* stats = nullptr) {
  const std::uint64_t n = g.vertices;
  auto dist = runtime::make_device<std::uint32_t>(n, false);
  auto active = runtime::make_device<std::uint32_t>(n);
  auto next = runtime::make_device<std::uint32_t>(n);
  auto changed = runtime::make_device<std::uint32_t>(1);
  runtime::memset_device(dist.get(), 0xff, n * 4);  // NaN bits: above every distance
  const std::uint32_t zero = 0, one = 1;
  runtime::copy_to_device(dist.get() + source, &zero, 4);
  runtime::copy_to_device(active.get() + source, &one, 4);
  const std::uint32_t rounds = detail_alg::until_unchanged(changed.get(), [&](std::uint32_t) {
    runtime::memset_device(next.get(), 0, n * 4);
    launch(sssp_round<G>{g, dist.get(), active.get(), next.get(), changed.get()});
    std::swap(active, next);
  });
  if (stats) stats->passes = rounds;
  const std::vector<std::uint32_t> bits = detail_alg::to_host(dist.get(), n);
  std::vector<float> out(n);
  for (std::uint64_t v = 0; v < n; ++v)
    out[v] = bits[v] == unreached ? -1.0f : detail_alg::bits_float(bits[v]);
  return out;
}

}  // namespace warpstore::apps
