#include "support/graph/csr.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "warpstore/detail/hash.cuh"

namespace warpstore::graph {
namespace {

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

// Runs fn(t) for t in [0, n) on n threads; rethrows the first exception one raised.
template <class Fn>
void run_threads(unsigned n, Fn&& fn) {
  if (n <= 1) {
    fn(0u);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(n);
  for (unsigned t = 0; t < n; ++t)
    pool.emplace_back([&, t] {
      try {
        fn(t);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Runs fn(begin, end) on `threads` contiguous shares of [0, n).
template <class Fn>
void parallel_for(unsigned threads, std::uint64_t n, Fn&& fn) {
  threads = n < 4096 ? 1u : std::max(1u, threads);
  const std::uint64_t share = (n + threads - 1) / threads;
  run_threads(threads, [&](unsigned t) {
    const std::uint64_t b = std::min(n, t * share), e = std::min(n, b + share);
    if (b < e || threads == 1) fn(b, e);
  });
}

// splitmix64's output for state x (the generated graphs depend on it).
std::uint64_t splitmix(std::uint64_t x) { return detail::mix64(x + detail::golden_gamma); }

// A bijection on [0, 2^bits): odd multipliers and xor-shifts, each invertible.
std::uint64_t scramble(std::uint64_t v, unsigned bits, std::uint64_t seed) {
  const std::uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
  const std::uint64_t k1 = splitmix(seed) | 1, k2 = splitmix(seed + 1) | 1;
  v = (v * k1) & mask;
  v ^= v >> (bits / 2 + 1);
  v = (v * k2) & mask;
  v ^= v >> (bits / 2 + 1);
  return v & mask;
}

void check_io(ssize_t r, const std::string& what, const std::string& path, std::uint64_t at) {
  if (r < 0)
    throw std::system_error(errno, std::generic_category(),
                            what + " " + path + " at byte " + std::to_string(at));
  if (r == 0) throw std::runtime_error(what + " " + path + ": unexpected end of file at byte " +
                                       std::to_string(at));
}

// Calls io(at, end) for every 64 MiB chunk of [0, bytes), `threads` at a time.
template <class Io>
void for_each_chunk(unsigned threads, std::uint64_t bytes, Io&& io) {
  constexpr std::uint64_t chunk = 64u << 20;
  const std::uint64_t chunks = (bytes + chunk - 1) / chunk;
  std::atomic<std::uint64_t> next{0};
  const unsigned n = static_cast<unsigned>(std::clamp<std::uint64_t>(chunks, 1, std::max(1u, threads)));
  run_threads(n, [&](unsigned) {
    for (std::uint64_t c = next++; c < chunks; c = next++)
      io(c * chunk, std::min(bytes, (c + 1) * chunk));
  });
}

// Bytes [offset, offset + bytes) of the file at `path`, 64 MiB chunks
// `threads` at a time: io(at, n, file_offset) is one pread or pwrite of up
// to n bytes from byte `at` of the range (interrupted ones are tried again,
// short ones continued); `what` ("reading", "writing") names it in errors.
template <class Io>
void transfer_range(const char* what, const std::string& path, std::uint64_t offset,
                    std::uint64_t bytes, unsigned threads, Io&& io) {
  for_each_chunk(threads, bytes, [&](std::uint64_t at, std::uint64_t end) {
    while (at < end) {
      const ssize_t r = io(at, end - at, static_cast<off_t>(offset + at));
      if (r < 0 && errno == EINTR) continue;
      check_io(r, what, path, offset + at);
      at += static_cast<std::uint64_t>(r);
    }
  });
}

void write_range(int fd, const std::string& path, std::uint64_t offset, const void* src,
                 std::uint64_t bytes, unsigned threads) {
  const auto* p = static_cast<const char*>(src);
  transfer_range(
      "writing", path, offset, bytes, threads,
      [&](std::uint64_t at, std::uint64_t n, off_t off) { return ::pwrite(fd, p + at, n, off); });
}

}  // namespace

csr_header make_header(std::uint64_t vertices, std::uint64_t edges, std::uint32_t flags) {
  if (vertices > (1ull << 32))
    throw std::invalid_argument("csr: " + std::to_string(vertices) +
                                " vertices do not fit 32-bit neighbour ids");
  csr_header h{};
  std::memcpy(h.magic, csr_magic, sizeof h.magic);
  h.version = csr_version;
  h.flags = flags;
  h.vertices = vertices;
  h.edges = edges;
  h.offsets_at = csr_section_align;
  h.neighbours_at = align_up(h.offsets_at + (vertices + 1) * 8, csr_section_align);
  const std::uint64_t after = align_up(h.neighbours_at + edges * 4, csr_section_align);
  h.weights_at = (flags & csr_flag::weighted) ? after : 0;
  h.file_bytes = h.weights_at ? align_up(h.weights_at + edges * 4, csr_section_align) : after;
  return h;
}

csr build_csr(std::uint64_t vertices, std::uint64_t count,
              const std::function<edge(std::uint64_t)>& edge_at, bool symmetrize, bool weighted,
              unsigned threads) {
  csr g;
  g.vertices = vertices;
  g.flags = (symmetrize ? csr_flag::symmetric : 0u) | (weighted ? csr_flag::weighted : 0u);
  auto check = [&](const edge& e, std::uint64_t i) {
    if (e.from >= vertices || e.to >= vertices)
      throw std::invalid_argument("csr: edge " + std::to_string(i) + " (" +
                                  std::to_string(e.from) + ", " + std::to_string(e.to) +
                                  ") has an endpoint >= " + std::to_string(vertices) +
                                  " vertices");
  };
  // Pass 1 counts each thread's share of every vertex's edges; pass 2
  // regenerates the same shares and writes each thread's edges of v into its
  // own slice of v's list. No atomics: hubs of skewed graphs would have
  // every thread fighting over one counter. edge_at is pure, so generated
  // graphs never hold an edge list.
  const unsigned shares = count < 4096 ? 1u : std::max(1u, threads);
  const std::uint64_t share = (count + shares - 1) / shares;
  std::vector<std::vector<std::uint32_t>> counts(shares);
  auto each_share = [&](auto&& fn) {
    run_threads(shares, [&](unsigned t) { fn(t, std::min(count, t * share), std::min(count, (t + 1) * share)); });
  };
  each_share([&](unsigned t, std::uint64_t b, std::uint64_t e) {
    std::vector<std::uint32_t>& c = counts[t];
    c.assign(vertices, 0);
    for (std::uint64_t i = b; i < e; ++i) {
      const edge x = edge_at(i);
      check(x, i);
      ++c[x.from];
      if (symmetrize && x.from != x.to) ++c[x.to];
    }
  });
  g.offsets.assign(vertices + 1, 0);
  parallel_for(threads, vertices, [&](std::uint64_t b, std::uint64_t e) {
    for (std::uint64_t v = b; v < e; ++v)
      for (unsigned t = 0; t < shares; ++t) g.offsets[v + 1] += counts[t][v];
  });
  for (std::uint64_t v = 0; v < vertices; ++v) g.offsets[v + 1] += g.offsets[v];
  // counts become each share's first slot within the list of v.
  parallel_for(threads, vertices, [&](std::uint64_t b, std::uint64_t e) {
    for (std::uint64_t v = b; v < e; ++v) {
      std::uint32_t at = 0;
      for (unsigned t = 0; t < shares; ++t) {
        const std::uint32_t n = counts[t][v];
        counts[t][v] = at;
        at += n;
      }
    }
  });
  g.neighbours.resize(g.offsets[vertices]);
  if (weighted) g.weights.resize(g.offsets[vertices]);
  each_share([&](unsigned t, std::uint64_t b, std::uint64_t e) {
    std::vector<std::uint32_t>& c = counts[t];
    auto put = [&](std::uint32_t from, std::uint32_t to, float w) {
      const std::uint64_t at = g.offsets[from] + c[from]++;
      g.neighbours[at] = to;
      if (weighted) g.weights[at] = w;
    };
    for (std::uint64_t i = b; i < e; ++i) {
      const edge x = edge_at(i);
      put(x.from, x.to, x.weight);
      if (symmetrize && x.from != x.to) put(x.to, x.from, x.weight);
    }
  });
  counts.clear();
  // Sorted lists make the file a function of the edges, not of thread timing.
  parallel_for(threads, vertices, [&](std::uint64_t b, std::uint64_t e) {
    std::vector<std::pair<std::uint32_t, float>> tmp;
    for (std::uint64_t v = b; v < e; ++v) {
      const std::uint64_t lo = g.offsets[v], hi = g.offsets[v + 1];
      if (!weighted) {
        std::sort(g.neighbours.begin() + lo, g.neighbours.begin() + hi);
        continue;
      }
      tmp.clear();
      for (std::uint64_t k = lo; k < hi; ++k) tmp.emplace_back(g.neighbours[k], g.weights[k]);
      std::sort(tmp.begin(), tmp.end());
      for (std::uint64_t k = lo; k < hi; ++k) {
        g.neighbours[k] = tmp[k - lo].first;
        g.weights[k] = tmp[k - lo].second;
      }
    }
  });
  return g;
}

float edge_weight(std::uint32_t u, std::uint32_t v, std::uint64_t seed) {
  const std::uint64_t lo = std::min(u, v), hi = std::max(u, v);
  return static_cast<float>(1 + splitmix(seed ^ (lo << 32 | hi)) % 64);
}

edge kronecker_edge(const kronecker_params& p, std::uint64_t i) {
  // Quadrant thresholds on 32 random bits; the quadrant is a sum of
  // comparisons, not branches (they would mispredict at every level).
  const double two32 = 4294967296.0;
  const auto ta = static_cast<std::uint64_t>(std::ceil(p.a * two32));
  const auto tb = static_cast<std::uint64_t>(std::ceil((p.a + p.b) * two32));
  const auto tc = static_cast<std::uint64_t>(std::ceil((p.a + p.b + p.c) * two32));
  std::uint64_t from = 0, to = 0, bits = 0;
  for (unsigned level = 0; level < p.scale; ++level) {
    // 32 random bits per level: two levels per 64-bit draw.
    if ((level & 1) == 0) bits = splitmix(p.seed * 0x100000001b3ull + i * 64 + level);
    const std::uint64_t r = bits & 0xffffffffu;
    bits >>= 32;
    const unsigned quadrant = (r >= ta) + (r >= tb) + (r >= tc);
    from = from << 1 | (quadrant >> 1);
    to = to << 1 | (quadrant & 1);
  }
  const auto f = static_cast<std::uint32_t>(scramble(from, p.scale, p.seed));
  const auto t = static_cast<std::uint32_t>(scramble(to, p.scale, p.seed));
  return {f, t, edge_weight(f, t, p.seed)};
}

edge uniform_edge(std::uint64_t vertices, std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t r = splitmix(seed * 0x100000001b3ull + i);
  const auto f = static_cast<std::uint32_t>((r & 0xffffffffu) * vertices >> 32);
  const auto t = static_cast<std::uint32_t>((r >> 32) * vertices >> 32);
  return {f, t, edge_weight(f, t, seed)};
}

csr generate_kronecker(const kronecker_params& p, bool weighted, unsigned threads) {
  if (p.scale < 1 || p.scale > 32)
    throw std::invalid_argument("kronecker: scale " + std::to_string(p.scale) +
                                " is outside 1..32");
  const std::uint64_t n = 1ull << p.scale;
  return build_csr(n, n * p.edge_factor, [&](std::uint64_t i) { return kronecker_edge(p, i); },
                   true, weighted, threads);
}

csr generate_uniform(std::uint64_t vertices, std::uint64_t edges, std::uint64_t seed,
                     bool weighted, unsigned threads) {
  if (vertices == 0) throw std::invalid_argument("uniform: a graph needs at least one vertex");
  return build_csr(vertices, edges,
                   [&](std::uint64_t i) { return uniform_edge(vertices, seed, i); }, true,
                   weighted, threads);
}

namespace {

std::string where(const std::string& path, std::uint64_t line) {
  return path + ":" + std::to_string(line);
}

csr from_edges(std::uint64_t vertices, const std::vector<edge>& edges, bool symmetrize,
               bool weighted, unsigned threads) {
  return build_csr(vertices, edges.size(), [&](std::uint64_t i) { return edges[i]; }, symmetrize,
                   weighted, threads);
}

}  // namespace

csr import_edge_list(const std::string& path, bool symmetrize, unsigned threads) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("edge list: cannot open " + path);
  std::vector<edge> edges;
  std::uint64_t max_id = 0, line_no = 0;
  bool weighted = false, first = true;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#' || line[start] == '%') continue;
    std::istringstream s(line);
    std::uint64_t u = 0, v = 0;
    if (!(s >> u >> v))
      throw std::runtime_error("edge list " + where(path, line_no) + ": expected \"from to\"");
    double w = 1;
    const bool has_weight = static_cast<bool>(s >> w);
    if (first) weighted = has_weight;
    if (has_weight != weighted)
      throw std::runtime_error("edge list " + where(path, line_no) +
                               ": weights on some lines and not on others");
    first = false;
    if (u >= (1ull << 32) || v >= (1ull << 32))
      throw std::runtime_error("edge list " + where(path, line_no) + ": id over 32 bits");
    max_id = std::max({max_id, u, v});
    edges.push_back({static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(v),
                     static_cast<float>(w)});
  }
  return from_edges(edges.empty() ? 0 : max_id + 1, edges, symmetrize, weighted, threads);
}

csr import_matrix_market(const std::string& path, bool symmetrize, unsigned threads) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("matrix market: cannot open " + path);
  std::string line;
  std::uint64_t line_no = 1;
  if (!std::getline(in, line) || line.rfind("%%MatrixMarket", 0) != 0)
    throw std::runtime_error("matrix market " + where(path, 1) + ": no %%MatrixMarket banner");
  std::istringstream banner(line);
  std::string tag, object, format, field, symmetry;
  banner >> tag >> object >> format >> field >> symmetry;
  for (auto* s : {&object, &format, &field, &symmetry})
    std::transform(s->begin(), s->end(), s->begin(), [](unsigned char c) { return std::tolower(c); });
  if (object != "matrix" || format != "coordinate")
    throw std::runtime_error("matrix market " + where(path, 1) +
                             ": only \"matrix coordinate\" is supported, not \"" + object + " " +
                             format + "\"");
  if (field != "pattern" && field != "real" && field != "integer")
    throw std::runtime_error("matrix market " + where(path, 1) + ": unsupported field " + field);
  if (symmetry != "general" && symmetry != "symmetric")
    throw std::runtime_error("matrix market " + where(path, 1) + ": unsupported symmetry " +
                             symmetry);
  const bool weighted = field != "pattern";
  std::uint64_t rows = 0, cols = 0, nnz = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '%') continue;
    std::istringstream s(line);
    if (!(s >> rows >> cols >> nnz))
      throw std::runtime_error("matrix market " + where(path, line_no) +
                               ": expected \"rows cols entries\"");
    break;
  }
  std::vector<edge> edges;
  edges.reserve(nnz);
  while (edges.size() < nnz && std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '%') continue;
    std::istringstream s(line);
    std::uint64_t r = 0, c = 0;
    double w = 1;
    if (!(s >> r >> c) || (weighted && !(s >> w)))
      throw std::runtime_error("matrix market " + where(path, line_no) + ": bad entry");
    if (r < 1 || r > rows || c < 1 || c > cols)
      throw std::runtime_error("matrix market " + where(path, line_no) + ": entry (" +
                               std::to_string(r) + ", " + std::to_string(c) +
                               ") outside the matrix");
    edges.push_back({static_cast<std::uint32_t>(r - 1), static_cast<std::uint32_t>(c - 1),
                     static_cast<float>(w)});
  }
  if (edges.size() != nnz)
    throw std::runtime_error("matrix market " + path + ": " + std::to_string(edges.size()) +
                             " entries, the size line said " + std::to_string(nnz));
  return from_edges(std::max(rows, cols), edges, symmetrize || symmetry == "symmetric", weighted,
                    threads);
}

void write_csr(const std::string& path, const csr& g, unsigned threads) {
  if (g.offsets.size() != g.vertices + 1 || g.offsets.back() != g.edges() ||
      (g.is_weighted() && g.weights.size() != g.edges()))
    throw std::invalid_argument("write_csr " + path + ": inconsistent graph");
  const csr_header h = make_header(g.vertices, g.edges(), g.flags);
  const std::string tmp = path + ".partial";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "creating " + tmp);
  try {
    if (::ftruncate(fd, static_cast<off_t>(h.file_bytes)) != 0)
      throw std::system_error(errno, std::generic_category(), "sizing " + tmp);
    write_range(fd, tmp, 0, &h, sizeof h, 1);
    write_range(fd, tmp, h.offsets_at, g.offsets.data(), g.offsets.size() * 8, threads);
    write_range(fd, tmp, h.neighbours_at, g.neighbours.data(), g.edges() * 4, threads);
    if (g.is_weighted()) write_range(fd, tmp, h.weights_at, g.weights.data(), g.edges() * 4, threads);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::system_error(errno, std::generic_category(), "renaming " + tmp + " to " + path);
}

void write_raw(const std::string& path, const void* src, std::uint64_t bytes, unsigned threads) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "creating " + path);
  try {
    write_range(fd, path, 0, src, bytes, threads);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

csr_header read_csr_header(const std::string& path) {
  csr_header h{};
  read_file_range(path, 0, sizeof h, &h, 1);
  if (std::memcmp(h.magic, csr_magic, sizeof h.magic) != 0)
    throw std::runtime_error(path + ": not a warpstore CSR file (bad magic)");
  if (h.version != csr_version)
    throw std::runtime_error(path + ": CSR version " + std::to_string(h.version) + ", expected " +
                             std::to_string(csr_version));
  const csr_header want = make_header(h.vertices, h.edges, h.flags);
  if (std::memcmp(&want, &h, sizeof h) != 0)
    throw std::runtime_error(path + ": CSR header sections do not match its vertex and edge counts");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "opening " + path);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  if (static_cast<std::uint64_t>(size) != h.file_bytes)
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, the header says " +
                             std::to_string(h.file_bytes));
  return h;
}

csr read_csr(const std::string& path, unsigned threads) {
  const csr_header h = read_csr_header(path);
  csr g;
  g.vertices = h.vertices;
  g.flags = h.flags;
  g.offsets.resize(h.vertices + 1);
  g.neighbours.resize(h.edges);
  read_file_range(path, h.offsets_at, g.offsets.size() * 8, g.offsets.data(), threads);
  read_file_range(path, h.neighbours_at, h.edges * 4, g.neighbours.data(), threads);
  if (h.is_weighted()) {
    g.weights.resize(h.edges);
    read_file_range(path, h.weights_at, h.edges * 4, g.weights.data(), threads);
  }
  if (g.offsets[0] != 0 || g.offsets.back() != h.edges)
    throw std::runtime_error(path + ": offsets do not run from 0 to the edge count");
  for (std::uint64_t v = 0; v < h.vertices; ++v)
    if (g.offsets[v + 1] < g.offsets[v])
      throw std::runtime_error(path + ": offsets decrease at vertex " + std::to_string(v));
  for (std::uint64_t e = 0; e < h.edges; ++e)
    if (g.neighbours[e] >= h.vertices)
      throw std::runtime_error(path + ": neighbour " + std::to_string(g.neighbours[e]) +
                               " of edge " + std::to_string(e) + " is not a vertex");
  return g;
}

void read_file_range(const std::string& path, std::uint64_t offset, std::uint64_t bytes, void* dst,
                     unsigned threads) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "opening " + path);
  auto* p = static_cast<char*>(dst);
  try {
    transfer_range(
        "reading", path, offset, bytes, threads,
        [&](std::uint64_t at, std::uint64_t n, off_t off) { return ::pread(fd, p + at, n, off); });
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace warpstore::graph
