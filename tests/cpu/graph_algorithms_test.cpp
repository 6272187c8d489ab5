// The graph kernels on the CPU target (std::thread lanes), over the graph in
// memory and over warpstore arrays served by the host and memory
// controllers, each checked against the CPU references; and the references
// themselves on graphs small enough to know the answer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "apps/graph/algorithms.cuh"
#include "apps/graph/launch.h"
#include "apps/graph/reference.h"
#include "support/graph/csr.h"
#include "warpstore/array.cuh"

using namespace warpstore;
using namespace warpstore::apps;

namespace {

// A path graph 0-1-2-3 plus an isolated vertex 4 and an edge 5-6.
graph::csr small_graph() {
  std::vector<graph::edge> e{{0, 1, 2}, {1, 2, 3}, {2, 3, 1}, {5, 6, 4}, {0, 3, 9}};
  return graph::build_csr(7, e.size(), [&](std::uint64_t i) { return e[i]; }, true, true, 1);
}

TEST(GraphReference, SmallGraphKnownAnswers) {
  const graph::csr g = small_graph();
  EXPECT_EQ(reference::bfs(g, 0, 2), (std::vector<std::uint32_t>{0, 1, 2, 1, unreached, unreached, unreached}));
  EXPECT_EQ(reference::components(g, 2), (std::vector<std::uint32_t>{0, 0, 0, 0, 4, 5, 5}));
  EXPECT_EQ(reference::sssp(g, 0), (std::vector<float>{0, 2, 5, 6, -1, -1, -1}));
  const std::vector<double> pr = reference::pagerank(g, 1, 0.85, 2);
  // One iteration from 1/7: vertex 4 has no edges and keeps only the teleport share.
  EXPECT_NEAR(pr[4], 0.15 / 7, 1e-12);
  EXPECT_NEAR(pr[5], 0.15 / 7 + 0.85 * (1.0 / 7), 1e-12);
}

// Every algorithm over `view` gives what the CPU reference gives on `g`.
template <class View>
void expect_references(cpu_launch launch, const View& view, const graph::csr& g) {
  const std::uint32_t source = g.neighbours[0];
  EXPECT_EQ(reference::compare_exact(run_bfs(launch, view, source), reference::bfs(g, source, 4)).first, "");
  const std::vector<std::uint32_t> components = reference::components(g, 4);
  EXPECT_EQ(reference::compare_exact(run_cc(launch, view), components).first,
            "");  // lower prefix only
  EXPECT_EQ(reference::compare_exact(run_cc(launch, view, nullptr, false), components).first, "");
  EXPECT_EQ(reference::compare_exact(run_sssp(launch, view, source), reference::sssp(g, source)).first, "");
  const auto pr = run_pagerank(launch, view, 4, 0.85f);
  EXPECT_EQ(reference::compare_close(pr, reference::pagerank(g, 4, 0.85, 4), 1e-4, 1e-9).first, "");
}

// The kernels over a plain pointer view (what the GPU baselines use).
TEST(GraphKernels, PlainViewMatchesReference) {
  graph::kronecker_params p;
  p.scale = 11;
  const graph::csr g = graph::generate_kronecker(p, true, 4);
  plain_graph view{g.vertices, g.offsets.data(), g.neighbours.data(), g.weights.data()};
  expect_references(cpu_launch{8}, view, g);
}

// The graph file behind arrays sharing one small cache, through a controller.
class StoreGraph : public ::testing::TestWithParam<controller_kind> {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/warpstore-graph-alg-" + std::to_string(::getpid()) + ".csr";
    graph::kronecker_params p;
    p.scale = 12;
    g_ = graph::generate_kronecker(p, true, 4);
    graph::write_csr(path_, g_, 4);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
  graph::csr g_;
};

TEST_P(StoreGraph, EveryAlgorithmMatchesReference) {
  const graph::csr_header h = graph::read_csr_header(path_);
  options o;
  o.controller = GetParam();
  o.cache_bytes = h.edge_bytes() / 4 / 4096 * 4096;  // a quarter of the edge bytes
  o.line_size = 4096;
  o.ways = 16;  // 4 lanes hold at most 8 pins (neighbours and weights): no set fills with them
  o.service_threads = 2;
  o.queue_pairs = 4;
  o.queue_depth = 16;
  o.direct = direct_io::off;
  o.timeout_ns = 30'000'000'000ull;
  auto c = std::make_shared<cache>(o);
  auto ctl = make_controller(path_, o);
  array<std::uint64_t> offsets(c, ctl, h.vertices + 1, h.offsets_at, o);
  array<std::uint32_t> neighbours(c, ctl, h.edges, h.neighbours_at, o);
  array<float> weights(c, ctl, h.edges, h.weights_at, o);
  store_graph view{h.vertices, offsets.ref(), neighbours.ref(), weights.ref(), true};
  expect_references(cpu_launch{4}, view, g_);
  offsets.check();
  neighbours.check();
  weights.check();
  const cache_stats s = c->stats();
  EXPECT_GT(s.evictions, 0u);  // the cache really was smaller than what was read
  EXPECT_EQ(s.errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Controllers, StoreGraph,
                         ::testing::Values(controller_kind::host, controller_kind::memory),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
