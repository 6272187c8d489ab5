// The graph files: generators, the CSR builder, the binary format and the
// importers (support/graph/csr.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "support/graph/csr.h"

using namespace warpstore::graph;

namespace {

// A path in TMPDIR removed at the end of the test.
class temp_path {
 public:
  explicit temp_path(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/warpstore-graph-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter_++) + suffix;
  }
  ~temp_path() { std::remove(path_.c_str()); }
  const std::string& str() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Every edge (u, v) of a symmetric graph has (v, u).
bool is_symmetric(const csr& g) {
  std::set<std::pair<std::uint32_t, std::uint32_t>> edges;
  for (std::uint64_t v = 0; v < g.vertices; ++v)
    for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k)
      edges.insert({static_cast<std::uint32_t>(v), g.neighbours[k]});
  for (const auto& [u, v] : edges)
    if (!edges.count({v, u})) return false;
  return true;
}

}  // namespace

TEST(KroneckerGenerator, DeterministicSymmetricSorted) {
  kronecker_params p;
  p.scale = 10;
  p.edge_factor = 8;
  const csr a = generate_kronecker(p, true, 4);
  const csr b = generate_kronecker(p, true, 1);
  EXPECT_EQ(a.vertices, 1024u);
  EXPECT_EQ(a.offsets, b.offsets);  // thread count does not change the graph
  EXPECT_EQ(a.neighbours, b.neighbours);
  EXPECT_EQ(a.weights, b.weights);
  // 8 K generated edges stored both ways, self loops once.
  EXPECT_GT(a.edges(), 8192u * 2 - 200);
  EXPECT_LE(a.edges(), 8192u * 2);
  EXPECT_TRUE(is_symmetric(a));
  for (std::uint64_t v = 0; v < a.vertices; ++v)
    EXPECT_TRUE(std::is_sorted(a.neighbours.begin() + a.offsets[v], a.neighbours.begin() + a.offsets[v + 1]));
  for (float w : a.weights) EXPECT_TRUE(w >= 1 && w <= 64 && w == static_cast<int>(w));
}

TEST(KroneckerGenerator, SkewedDegrees) {
  kronecker_params p;
  p.scale = 14;
  const csr g = generate_kronecker(p, false, 4);
  std::uint64_t max_degree = 0, isolated = 0;
  for (std::uint64_t v = 0; v < g.vertices; ++v) {
    max_degree = std::max(max_degree, g.degree(v));
    isolated += g.degree(v) == 0;
  }
  // Graph500 graphs have hubs far above the mean degree (32) and many isolated vertices.
  EXPECT_GT(max_degree, 32u * 20);
  EXPECT_GT(isolated, g.vertices / 10);
}

TEST(UniformGenerator, EdgeCountAndRange) {
  const csr g = generate_uniform(1000, 5000, 3, false, 4);
  EXPECT_EQ(g.vertices, 1000u);
  EXPECT_LE(g.edges(), 10000u);
  EXPECT_GT(g.edges(), 9900u);
  for (std::uint32_t n : g.neighbours) EXPECT_LT(n, 1000u);
  EXPECT_TRUE(is_symmetric(g));
}

TEST(CsrFormat, HeaderLayoutAligned) {
  const csr_header h = make_header(1000, 12345, csr_flag::weighted);
  EXPECT_EQ(h.offsets_at % csr_section_align, 0u);
  EXPECT_EQ(h.neighbours_at % csr_section_align, 0u);
  EXPECT_EQ(h.weights_at % csr_section_align, 0u);
  EXPECT_GE(h.neighbours_at, h.offsets_at + 1001 * 8);
  EXPECT_GE(h.weights_at, h.neighbours_at + 12345 * 4);
  EXPECT_EQ(h.file_bytes % csr_section_align, 0u);
  EXPECT_EQ(make_header(10, 10, 0).weights_at, 0u);
  EXPECT_THROW(make_header((1ull << 32) + 1, 1, 0), std::invalid_argument);
}

TEST(CsrFormat, RoundTrip) {
  kronecker_params p;
  p.scale = 9;
  const csr g = generate_kronecker(p, true, 2);
  temp_path f(".csr");
  write_csr(f.str(), g, 3);
  const csr_header h = read_csr_header(f.str());
  EXPECT_EQ(h.vertices, g.vertices);
  EXPECT_EQ(h.edges, g.edges());
  EXPECT_TRUE(h.is_weighted());
  EXPECT_TRUE(h.is_symmetric());
  const csr r = read_csr(f.str(), 3);
  EXPECT_EQ(r.offsets, g.offsets);
  EXPECT_EQ(r.neighbours, g.neighbours);
  EXPECT_EQ(r.weights, g.weights);
}

TEST(CsrFormat, RejectsDamagedFiles) {
  const csr g = generate_uniform(100, 300, 1, false, 1);
  temp_path f(".csr");
  write_csr(f.str(), g, 1);
  {  // a neighbour id out of range
    std::fstream io(f.str(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(read_csr_header(f.str()).neighbours_at));
    const std::uint32_t bad = 100;
    io.write(reinterpret_cast<const char*>(&bad), 4);
  }
  EXPECT_THROW(read_csr(f.str(), 1), std::runtime_error);
  ASSERT_EQ(::truncate(f.str().c_str(), 4096), 0);  // shorter than the header says
  EXPECT_THROW(read_csr_header(f.str()), std::runtime_error);
  write_text(f.str(), "not a graph at all, just text that is long enough to hold a header.......");
  EXPECT_THROW(read_csr_header(f.str()), std::runtime_error);
}

TEST(Importers, EdgeList) {
  temp_path in(".txt");
  write_text(in.str(), "# comment\n0 1\n1 2\n\n% other comment\n3 0\n");
  const csr g = import_edge_list(in.str(), false, 2);
  EXPECT_EQ(g.vertices, 4u);
  EXPECT_EQ(g.offsets, (std::vector<std::uint64_t>{0, 1, 2, 2, 3}));
  EXPECT_EQ(g.neighbours, (std::vector<std::uint32_t>{1, 2, 0}));
  EXPECT_FALSE(g.is_weighted());
  const csr s = import_edge_list(in.str(), true, 2);
  EXPECT_EQ(s.edges(), 6u);
  EXPECT_TRUE(is_symmetric(s));
}

TEST(Importers, EdgeListWeightsAndErrors) {
  temp_path in(".txt");
  write_text(in.str(), "0 1 2.5\n1 0 4\n");
  const csr g = import_edge_list(in.str(), false, 1);
  EXPECT_TRUE(g.is_weighted());
  EXPECT_EQ(g.weights, (std::vector<float>{2.5f, 4.0f}));
  write_text(in.str(), "0 1 2.5\n1 0\n");
  EXPECT_THROW(import_edge_list(in.str(), false, 1), std::runtime_error);
  write_text(in.str(), "0 x\n");
  try {
    import_edge_list(in.str(), false, 1);
    FAIL() << "a bad line must raise";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(in.str() + ":1"), std::string::npos) << e.what();
  }
}

TEST(Importers, MatrixMarketSymmetricPattern) {
  temp_path in(".mtx");
  write_text(in.str(),
             "%%MatrixMarket matrix coordinate pattern symmetric\n% a comment\n4 4 3\n2 1\n3 2\n4 4\n");
  const csr g = import_matrix_market(in.str(), false, 1);
  EXPECT_EQ(g.vertices, 4u);
  EXPECT_EQ(g.offsets, (std::vector<std::uint64_t>{0, 1, 3, 4, 5}));
  EXPECT_EQ(g.neighbours, (std::vector<std::uint32_t>{1, 0, 2, 1, 3}));
  EXPECT_TRUE(is_symmetric(g));
}

TEST(Importers, MatrixMarketRealGeneralAndErrors) {
  temp_path in(".mtx");
  write_text(in.str(), "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 0.5\n3 1 7\n");
  const csr g = import_matrix_market(in.str(), false, 1);
  EXPECT_EQ(g.neighbours, (std::vector<std::uint32_t>{1, 0}));
  EXPECT_EQ(g.weights, (std::vector<float>{0.5f, 7.0f}));
  write_text(in.str(), "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 0.5\n4 1 7\n");
  EXPECT_THROW(import_matrix_market(in.str(), false, 1), std::runtime_error);  // outside
  write_text(in.str(), "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 0.5\n");
  EXPECT_THROW(import_matrix_market(in.str(), false, 1), std::runtime_error);  // short
  write_text(in.str(), "%%MatrixMarket matrix array real general\n3 3\n");
  EXPECT_THROW(import_matrix_market(in.str(), false, 1), std::runtime_error);  // dense
}
