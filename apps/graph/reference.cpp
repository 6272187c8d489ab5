#include "apps/graph/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <thread>

namespace warpstore::apps::reference {
namespace {

void parallel(unsigned threads, std::uint64_t n, const std::function<void(std::uint64_t, std::uint64_t)>& fn) {
  threads = std::max(1u, threads);
  std::vector<std::thread> pool;
  const std::uint64_t share = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t b = std::min(n, t * share), e = std::min(n, b + share);
    if (b < e) pool.emplace_back(fn, b, e);
  }
  for (auto& th : pool) th.join();
}

}  // namespace

std::vector<std::uint32_t> bfs(const graph::csr& g, std::uint32_t source, unsigned threads) {
  std::vector<std::uint32_t> level(g.vertices, 0xffffffffu);
  std::vector<std::uint32_t> frontier{source};
  level[source] = 0;
  for (std::uint32_t cur = 0; !frontier.empty(); ++cur) {
    std::vector<std::vector<std::uint32_t>> found(std::max(1u, threads));
    std::atomic<unsigned> slot{0};
    parallel(threads, frontier.size(), [&](std::uint64_t b, std::uint64_t e) {
      auto& mine = found[slot++];
      for (std::uint64_t i = b; i < e; ++i) {
        const std::uint32_t v = frontier[i];
        for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k) {
          std::uint32_t expected = 0xffffffffu;
          if (std::atomic_ref<std::uint32_t>(level[g.neighbours[k]])
                  .compare_exchange_strong(expected, cur + 1, std::memory_order_relaxed))
            mine.push_back(g.neighbours[k]);
        }
      }
    });
    frontier.clear();
    for (auto& f : found) frontier.insert(frontier.end(), f.begin(), f.end());
  }
  return level;
}

std::vector<std::uint32_t> components(const graph::csr& g, unsigned threads) {
  // Union by lower id under a lock-free link, then the minimum per root
  // computed explicitly (not assumed from the linking rule).
  std::vector<std::uint32_t> parent(g.vertices);
  for (std::uint64_t v = 0; v < g.vertices; ++v) parent[v] = static_cast<std::uint32_t>(v);
  auto find = [&](std::uint32_t x) {
    while (true) {
      std::uint32_t p = std::atomic_ref<std::uint32_t>(parent[x]).load(std::memory_order_relaxed);
      if (p == x) return x;
      const std::uint32_t gp = std::atomic_ref<std::uint32_t>(parent[p]).load(std::memory_order_relaxed);
      if (gp != p) std::atomic_ref<std::uint32_t>(parent[x]).compare_exchange_strong(p, gp);
      x = gp;
    }
  };
  parallel(threads, g.vertices, [&](std::uint64_t b, std::uint64_t e) {
    for (std::uint64_t v = b; v < e; ++v)
      for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k) {
        std::uint32_t a = static_cast<std::uint32_t>(v), c = g.neighbours[k];
        while (true) {
          a = find(a);
          c = find(c);
          if (a == c) break;
          if (a < c) std::swap(a, c);
          std::uint32_t expected = a;
          if (std::atomic_ref<std::uint32_t>(parent[a]).compare_exchange_strong(expected, c)) break;
        }
      }
  });
  std::vector<std::uint32_t> root(g.vertices), smallest(g.vertices, 0xffffffffu);
  parallel(threads, g.vertices, [&](std::uint64_t b, std::uint64_t e) {
    for (std::uint64_t v = b; v < e; ++v) {
      root[v] = find(static_cast<std::uint32_t>(v));
      std::atomic_ref<std::uint32_t> s(smallest[root[v]]);
      std::uint32_t cur = s.load();
      while (v < cur && !s.compare_exchange_weak(cur, static_cast<std::uint32_t>(v))) {}
    }
  });
  std::vector<std::uint32_t> label(g.vertices);
  parallel(threads, g.vertices, [&](std::uint64_t b, std::uint64_t e) {
    for (std::uint64_t v = b; v < e; ++v) label[v] = smallest[root[v]];
  });
  return label;
}

std::vector<double> pagerank(const graph::csr& g, std::uint32_t iterations, double damping,
                             unsigned threads) {
  const std::uint64_t n = g.vertices;
  std::vector<double> rank(n, 1.0 / static_cast<double>(n)), contrib(n);
  for (std::uint32_t it = 0; it < iterations; ++it) {
    parallel(threads, n, [&](std::uint64_t b, std::uint64_t e) {
      for (std::uint64_t v = b; v < e; ++v)
        contrib[v] = g.degree(v) ? rank[v] / static_cast<double>(g.degree(v)) : 0.0;
    });
    parallel(threads, n, [&](std::uint64_t b, std::uint64_t e) {
      for (std::uint64_t v = b; v < e; ++v) {
        double sum = 0;
        for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k) sum += contrib[g.neighbours[k]];
        rank[v] = (1.0 - damping) / static_cast<double>(n) + damping * sum;
      }
    });
  }
  return rank;
}

std::vector<float> sssp(const graph::csr& g, std::uint32_t source) {
  std::vector<float> dist(g.vertices, std::numeric_limits<float>::infinity());
  using item = std::pair<float, std::uint32_t>;
  std::priority_queue<item, std::vector<item>, std::greater<>> heap;
  dist[source] = 0;
  heap.push({0.0f, source});
  while (!heap.empty()) {
    const auto [d, v] = heap.top();
    heap.pop();
    if (d > dist[v]) continue;
    for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k) {
      const float w = g.is_weighted() ? g.weights[k] : 1.0f;
      const float nd = d + w;
      if (nd < dist[g.neighbours[k]]) {
        dist[g.neighbours[k]] = nd;
        heap.push({nd, g.neighbours[k]});
      }
    }
  }
  for (float& d : dist)
    if (std::isinf(d)) d = -1.0f;
  return dist;
}

namespace {

template <class A, class B, class Same>
comparison compare(const std::vector<A>& got, const std::vector<B>& want, Same same) {
  comparison c;
  if (got.size() != want.size()) {
    c.mismatches = std::max(got.size(), want.size());
    c.first = "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
    return c;
  }
  for (std::size_t v = 0; v < got.size(); ++v)
    if (!same(got[v], want[v])) {
      if (c.mismatches++ == 0)
        c.first = "vertex " + std::to_string(v) + ": got " + std::to_string(got[v]) + ", expected " +
                  std::to_string(want[v]);
    }
  return c;
}

}  // namespace

comparison compare_exact(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want) {
  return compare(got, want, [](std::uint32_t a, std::uint32_t b) { return a == b; });
}
comparison compare_exact(const std::vector<float>& got, const std::vector<float>& want) {
  return compare(got, want, [](float a, float b) { return a == b; });
}
comparison compare_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                         double abs) {
  return compare(got, want, [&](float a, double b) { return std::fabs(a - b) <= rel * std::fabs(b) + abs; });
}

}  // namespace warpstore::apps::reference
