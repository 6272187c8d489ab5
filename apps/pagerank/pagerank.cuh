// Iterative PageRank that checkpoints its state with a warpstore checkpoint
// group and resumes from the newest checkpoint when restarted. Written once
// for the GPU and the CPU target (apps/graph's launch abstraction:
// launch(body) runs body(warp, warps) on every warp, then waits).
//
// Deterministic, so state k is reproducible bit for bit on either target:
// pull form on a symmetric CSR graph (in-neighbours = neighbours), one lane
// per vertex summing its neighbours in adjacency order, in double, with every
// operation correctly rounded and none fused (add_rn / mul_rn / div_rn):
//
//   rank_{k+1}(v) = (1 - d) / n + d * sum over neighbours u of rank_k(u) / degree(u)
//
// rank_0 = 1 / n. Mass of vertices without edges is not redistributed.
//
// The state checkpointed is a 64-byte header (iteration, vertices, edges,
// damping, a graph fingerprint) and the rank vector; `next` is scratch.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/graph/csr.h"
#include "warpstore/durable/checkpoint.cuh"
#include "warpstore/runtime.h"

namespace warpstore::apps::pagerank {

// IEEE operations the compiler may not contract into fused multiply-adds
// (nvcc would; the CPU reference must round the same way).
WARPSTORE_HD inline double add_rn(double a, double b) {
#if WARPSTORE_ON_GPU
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
WARPSTORE_HD inline double mul_rn(double a, double b) {
#if WARPSTORE_ON_GPU
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
WARPSTORE_HD inline double div_rn(double a, double b) {
#if WARPSTORE_ON_GPU
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// The checkpointed header (one registered buffer).
struct state_header {
  std::uint64_t magic;  // header_magic
  std::uint64_t iteration;
  std::uint64_t vertices;
  std::uint64_t edges;
  double damping;
  std::uint64_t fingerprint;  // of the graph's offsets and neighbours
  std::uint64_t reserved[2];
};
static_assert(sizeof(state_header) == 64);
inline constexpr std::uint64_t header_magic = 0x4B4E415247415057ull;  // "WPAGRANK"

// A cheap fingerprint of the graph, so a checkpoint of another graph is refused.
inline std::uint64_t fingerprint(const graph::csr& g) {
  std::uint64_t h = warpstore::detail::mix64(g.vertices);
  const std::uint64_t step = std::max<std::uint64_t>(1, g.neighbours.size() / 4096);
  for (std::uint64_t k = 0; k < g.neighbours.size(); k += step) h = warpstore::detail::mix64(h ^ ckpt::mix(g.neighbours[k], k));
  const std::uint64_t vstep = std::max<std::uint64_t>(1, g.offsets.size() / 4096);
  for (std::uint64_t v = 0; v < g.offsets.size(); v += vstep) h = warpstore::detail::mix64(h ^ ckpt::mix(g.offsets[v], v + (1ull << 40)));
  return h;
}

// The graph where kernels read it (GPU memory; host memory on the CPU target).
struct device_graph {
  std::uint64_t vertices = 0;
  const std::uint64_t* offsets = nullptr;
  const std::uint32_t* neighbours = nullptr;
};

// One iteration: next(v) from rank, one lane per vertex.
struct step_body {
  device_graph g;
  const double* rank;
  double* next;
  double base;  // (1 - d) / n
  double damping;

  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned size = detail::warp::size;
    for (std::uint64_t v = warp * size + detail::warp::lane(); v < g.vertices; v += warps * size) {
      double sum = 0;
      for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k) {
        const std::uint32_t u = g.neighbours[k];
        const double degree = static_cast<double>(g.offsets[u + 1] - g.offsets[u]);
        sum = add_rn(sum, div_rn(rank[u], degree));
      }
      next[v] = add_rn(base, mul_rn(damping, sum));
    }
  }
};

// Copies next into rank (the registered buffer) once every lane is done.
struct copy_body {
  std::uint64_t count;
  const double* from;
  double* to;
  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    const unsigned size = detail::warp::size;
    for (std::uint64_t i = warp * size + detail::warp::lane(); i < count; i += warps * size) to[i] = from[i];
  }
};

// The device form of a checkpoint, from inside a kernel: every warp of the
// launch takes its share; the last one to finish commits.
struct checkpoint_body {
  checkpoint_ref ref;
  WARPSTORE_HD void operator()(std::uint64_t warp, std::uint64_t warps) const {
    ref.checkpoint(warp, warps);
  }
};

inline double base_of(std::uint64_t vertices, double damping) {
  return (1.0 - damping) / static_cast<double>(vertices);
}

// The CPU reference: `iterations` steps from scratch, the same arithmetic in
// the same order, written apart from the kernel body.
inline std::vector<double> reference(const graph::csr& g, std::uint64_t iterations, double damping) {
  const std::uint64_t n = g.vertices;
  std::vector<double> rank(n, 1.0 / static_cast<double>(n)), next(n);
  const double base = base_of(n, damping);
  for (std::uint64_t it = 0; it < iterations; ++it) {
    for (std::uint64_t v = 0; v < n; ++v) {
      double sum = 0;
      for (std::uint64_t k = g.offsets[v]; k < g.offsets[v + 1]; ++k) {
        const std::uint32_t u = g.neighbours[k];
        sum = add_rn(sum, div_rn(rank[u], static_cast<double>(g.degree(u))));
      }
      next[v] = add_rn(base, mul_rn(damping, sum));
    }
    rank.swap(next);
  }
  return rank;
}

// PageRank over one graph with its state in a checkpoint group.
template <class Launch>
class solver {
 public:
  // Copies the graph to the device, registers header and ranks, opens (and
  // sizes) the checkpoint file `path` through `open` (default make_controller).
  solver(Launch launch, const graph::csr& g, double damping, const std::string& path,
         const options& opts, const controller_opener& open = nullptr)
      : launch_(launch), n_(g.vertices), edges_(g.edges()), damping_(damping) {
    if (g.vertices == 0) throw std::invalid_argument("pagerank: the graph has no vertices");
    if ((g.flags & graph::csr_flag::symmetric) == 0)
      throw std::invalid_argument("pagerank: the pull form needs a symmetric graph (build it with symmetrize)");
    if (!(damping > 0 && damping < 1)) throw std::invalid_argument("pagerank: damping must be in (0, 1)");
    offsets_ = runtime::make_device<std::uint64_t>(n_ + 1, false);
    neighbours_ = runtime::make_device<std::uint32_t>(std::max<std::uint64_t>(1, edges_), false);
    runtime::copy_to_device(offsets_.get(), g.offsets.data(), (n_ + 1) * 8);
    if (edges_ != 0) runtime::copy_to_device(neighbours_.get(), g.neighbours.data(), edges_ * 4);
    header_ = runtime::make_device<state_header>(1);
    rank_ = runtime::make_device<double>(n_, false);
    next_ = runtime::make_device<double>(n_, false);
    host_header_ = state_header{header_magic, 0, n_, edges_, damping, fingerprint(g), {0, 0}};
    group_.add(header_.get(), sizeof(state_header), "header").add(rank_.get(), n_ * 8, "ranks");
    group_.open(path, opts, open);
  }

  // Restores the newest checkpoint (returns its iteration), or starts from
  // rank_0 when the file has none (returns 0; nothing committed yet).
  std::uint64_t resume() {
    const restore_result r = group_.restore();
    restored_ = r.restored();
    if (r.restored()) {
      state_header h{};
      runtime::copy_to_host(&h, header_.get(), sizeof h);
      if (h.magic != header_magic || h.vertices != n_ || h.edges != edges_ ||
          h.fingerprint != host_header_.fingerprint || h.damping != damping_)
        throw std::runtime_error("pagerank: checkpoint " + std::to_string(r.sequence) + " in " +
                                 group_.path() + " is of another graph or damping");
      host_header_ = h;
      return h.iteration;
    }
    std::vector<double> init(n_, 1.0 / static_cast<double>(n_));
    runtime::copy_to_device(rank_.get(), init.data(), n_ * 8);
    host_header_.iteration = 0;
    runtime::copy_to_device(header_.get(), &host_header_, sizeof host_header_);
    return 0;
  }

  // One iteration (then the header says iteration + 1).
  void step() {
    device_graph g{n_, offsets_.get(), neighbours_.get()};
    launch_(step_body{g, rank_.get(), next_.get(), base_of(n_, damping_), damping_});
    launch_(copy_body{n_, next_.get(), rank_.get()});
    ++host_header_.iteration;
    runtime::copy_to_device(header_.get(), &host_header_, sizeof host_header_);
  }

  // Checkpoints the current state from inside a kernel (every warp of a
  // launch its share) and returns the committed sequence once durable.
  std::uint64_t checkpoint_in_kernel() {
    launch_(checkpoint_body{group_.ref()});
    const checkpoint_outcome o = group_.finish();
    if (o != checkpoint_outcome::committed)
      throw std::runtime_error(std::string("pagerank: checkpoint ended ") + to_string(o));
    return group_.latest_sequence();
  }
  // The host form of the same.
  std::uint64_t checkpoint() { return group_.checkpoint(); }

  std::uint64_t iteration() const { return host_header_.iteration; }
  // Whether the last resume() found a checkpoint.
  bool restored() const { return restored_; }
  std::vector<double> ranks() const {
    std::vector<double> out(n_);
    runtime::copy_to_host(out.data(), rank_.get(), n_ * 8);
    return out;
  }
  checkpoint_group& group() { return group_; }

 private:
  Launch launch_;
  std::uint64_t n_;
  std::uint64_t edges_;
  double damping_;
  runtime::device_ptr<std::uint64_t> offsets_;
  runtime::device_ptr<std::uint32_t> neighbours_;
  runtime::device_ptr<state_header> header_;
  runtime::device_ptr<double> rank_;
  runtime::device_ptr<double> next_;
  state_header host_header_{};
  bool restored_ = false;
  checkpoint_group group_;  // declared last: closes before the buffers go
};

}  // namespace warpstore::apps::pagerank
