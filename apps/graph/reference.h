// CPU references every graph run is checked against: parallel level-synchronous
// BFS, union-find components, PageRank in double, Dijkstra. Written apart
// from the kernels (no shared code path) so that a bug in one shows up as a
// mismatch against the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/graph/csr.h"

namespace warpstore::apps::reference {

// Level of every vertex (0xffffffff: unreached).
std::vector<std::uint32_t> bfs(const graph::csr& g, std::uint32_t source, unsigned threads);
// The smallest vertex id of each vertex's component (the graph must be symmetric).
std::vector<std::uint32_t> components(const graph::csr& g, unsigned threads);
// `iterations` pull iterations from 1/n, mass of isolated vertices not redistributed.
std::vector<double> pagerank(const graph::csr& g, std::uint32_t iterations, double damping,
                             unsigned threads);
// Shortest distances from `source` (-1: unreached).
std::vector<float> sssp(const graph::csr& g, std::uint32_t source);

// Mismatch counts; `first` names the first one ("" when there is none).
struct comparison {
  std::uint64_t mismatches = 0;
  std::string first;
};
comparison compare_exact(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want);
comparison compare_exact(const std::vector<float>& got, const std::vector<float>& want);
// |got - want| <= rel * want + abs for every vertex.
comparison compare_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                         double abs);

}  // namespace warpstore::apps::reference
