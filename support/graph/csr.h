// Graphs as CSR files: the binary format, building CSR from edges,
// the Kronecker (Graph500) and uniform random generators, and importers for
// edge lists and Matrix Market. CPU only; kernels read the files through
// warpstore arrays or the baselines' loaders.
//
// File format (all integers little-endian; every section starts at a multiple
// of 64 KiB, so lines of any size up to 64 KiB never straddle two sections):
//
//   offset 0        header (csr_header, zero-padded to 64 KiB)
//   offsets_at      u64 offsets[vertices + 1]; offsets[0] = 0, non-decreasing,
//                   offsets[vertices] = edges
//   neighbours_at   u32 neighbours[edges]; neighbours of v are
//                   neighbours[offsets[v] .. offsets[v + 1]), sorted ascending
//   weights_at      f32 weights[edges], parallel to neighbours (only when
//                   flags has csr_flag::weighted; weights_at is 0 otherwise)
//   file size       a multiple of 64 KiB
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace warpstore::graph {

inline constexpr char csr_magic[8] = {'W', 'S', 'C', 'S', 'R', '0', '1', '\0'};
inline constexpr std::uint32_t csr_version = 1;
inline constexpr std::uint64_t csr_section_align = 64 * 1024;

enum csr_flag : std::uint32_t {
  weighted = 1u << 0,   // a weights section follows the neighbours
  symmetric = 1u << 1,  // every edge (u, v) also appears as (v, u): an undirected graph
};

struct csr_header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t flags;
  std::uint64_t vertices;
  std::uint64_t edges;  // CSR entries (an undirected edge counts twice)
  std::uint64_t offsets_at;
  std::uint64_t neighbours_at;
  std::uint64_t weights_at;
  std::uint64_t file_bytes;

  bool is_weighted() const { return (flags & csr_flag::weighted) != 0; }
  bool is_symmetric() const { return (flags & csr_flag::symmetric) != 0; }
  std::uint64_t edge_bytes() const { return edges * (is_weighted() ? 8 : 4); }
};

// Where each section of a graph with this shape starts, and the file size.
csr_header make_header(std::uint64_t vertices, std::uint64_t edges, std::uint32_t flags);

// A graph in host memory.
struct csr {
  std::uint64_t vertices = 0;
  std::uint32_t flags = 0;
  std::vector<std::uint64_t> offsets;  // vertices + 1
  std::vector<std::uint32_t> neighbours;
  std::vector<float> weights;          // empty unless weighted

  std::uint64_t edges() const { return neighbours.size(); }
  bool is_weighted() const { return (flags & csr_flag::weighted) != 0; }
  std::uint64_t degree(std::uint64_t v) const { return offsets[v + 1] - offsets[v]; }
};

struct edge {
  std::uint32_t from;
  std::uint32_t to;
  float weight;
};

// Builds a CSR from `count` edges, edge_at(i) giving edge i (called from
// several threads, twice per edge: a pure function of i). With `symmetrize`
// each edge is stored both ways (self loops once) and the result is flagged
// symmetric. Adjacency lists are sorted by neighbour (weights follow).
// Raises std::invalid_argument for an endpoint >= vertices.
csr build_csr(std::uint64_t vertices, std::uint64_t count,
              const std::function<edge(std::uint64_t)>& edge_at, bool symmetrize, bool weighted,
              unsigned threads);

// Graph500 Kronecker: 2^scale vertices, edge_factor * 2^scale generated edges,
// initiator A=0.57, B=0.19, C=0.19 (D=0.05), vertex labels scrambled by a
// bijection so that degree does not follow the label. Counter-based: edge i
// is a pure function of (seed, i).
struct kronecker_params {
  unsigned scale = 20;
  unsigned edge_factor = 16;
  std::uint64_t seed = 1;
  double a = 0.57, b = 0.19, c = 0.19;
};
edge kronecker_edge(const kronecker_params& p, std::uint64_t i);
// Uniform random: both endpoints uniform over `vertices`.
edge uniform_edge(std::uint64_t vertices, std::uint64_t seed, std::uint64_t i);
// Integer-valued weights in [1, 64], the same for (u, v) and (v, u): sums of
// them stay exact in float, so SSSP results compare exactly.
float edge_weight(std::uint32_t u, std::uint32_t v, std::uint64_t seed);

csr generate_kronecker(const kronecker_params& p, bool weighted, unsigned threads);
csr generate_uniform(std::uint64_t vertices, std::uint64_t edges, std::uint64_t seed,
                     bool weighted, unsigned threads);

// Importers. Edge list: one edge per line, "from to [weight]", 0-based;
// blank lines and lines starting with '#' or '%' are skipped. Matrix Market:
// "%%MatrixMarket matrix coordinate pattern|real|integer general|symmetric",
// 1-based; a symmetric file is stored both ways. Vertices are max id + 1
// (edge list) or the larger matrix dimension (Matrix Market). Errors name the
// file and line.
csr import_edge_list(const std::string& path, bool symmetrize, unsigned threads);
csr import_matrix_market(const std::string& path, bool symmetrize, unsigned threads);

// Writes `g` in the format above (parallel pwrite), replacing `path`.
void write_csr(const std::string& path, const csr& g, unsigned threads);
// Reads and checks the header: magic, version, section layout, file size.
csr_header read_csr_header(const std::string& path);
// Reads the whole graph and checks offsets (monotone, ending at edges) and
// neighbour ids (< vertices).
csr read_csr(const std::string& path, unsigned threads);

// Writes `bytes` from `src` as the whole file `path` (parallel pwrite).
void write_raw(const std::string& path, const void* src, std::uint64_t bytes, unsigned threads);
// Reads bytes [offset, offset + bytes) of `path` into `dst` with `threads`
// parallel preads (what every baseline does to load a graph or a column).
void read_file_range(const std::string& path, std::uint64_t offset, std::uint64_t bytes, void* dst,
                     unsigned threads);

}  // namespace warpstore::graph
