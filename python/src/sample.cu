// Neighbour sampling on the GPU (sample.h). Per hop, on the caller's stream:
//   flags:   one slot per (frontier node, draw); set where the draw exists
//   select:  the set slots, in order (CUB DeviceSelect::Flagged)
//   edges:   each slot's edge and source; the source claimed in `local` by
//            the first slot that reaches it (lowest position wins)
//   firsts:  which slots won a node not seen before
//   select:  those nodes, in order
//   adopt:   each new node's batch-local id (appended after the last hop's)
//   relabel: the sources' batch-local ids
// The frontier's size and each hop's count stay in GPU memory (the kernels
// read them there, the launches cover the capacities), so nothing waits
// for the GPU until the caller reads `sizes` at the end.
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "sample.h"
#include "warpstore/cuda_check.h"
#include "warpstore/error.h"

namespace warpstore::python {

namespace {

constexpr unsigned block_threads = 256;
constexpr std::size_t align_bytes = 256;

std::size_t aligned(std::size_t b) { return (b + align_bytes - 1) / align_bytes * align_bytes; }

unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + block_threads - 1) / block_threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, 65535));
}

// The device-side counters of one batch: per hop the frontier's size
// (frontier[0]: the seeds), per hop its edges, and the first problem.
struct counters {
  static constexpr int max_hops = 16;
  std::int64_t frontier[max_hops + 1];
  std::int64_t edges[max_hops];
  std::int64_t problem;
  std::int64_t sizes[2 * max_hops + 2];  // what sample_job::sizes gets, gathered at the end
};

__device__ void report(counters* c, std::int64_t problem) {
  atomicCAS(reinterpret_cast<unsigned long long*>(&c->problem), 0ull,
            static_cast<unsigned long long>(problem));
}

// Where hop h's frontier starts in the batch's nodes: after the seeds and
// every hop before it.
__device__ std::int64_t frontier_start(const counters* c, int hop) {
  std::int64_t at = 0;
  for (int h = 0; h < hop; ++h) at += c->frontier[h];
  return at;
}

// splitmix64's finaliser over the draw's coordinates: a uniform 64-bit word.
__device__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Draw `draw` of the node at batch position `at` in hop `hop`: the edge
// position within its `degree` neighbours.
__device__ std::int64_t pick(std::uint64_t key, int hop, std::int64_t at, std::int64_t draw,
                             std::int64_t degree) {
  const std::uint64_t h =
      mix(key ^ mix((static_cast<std::uint64_t>(hop) << 56) ^
                    (static_cast<std::uint64_t>(at) << 8) ^ static_cast<std::uint64_t>(draw)));
  const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  const auto p = static_cast<std::int64_t>(u * static_cast<double>(degree));
  return p < degree ? p : degree - 1;
}

__global__ void seed_kernel(const std::int64_t* seed, std::int64_t seeds, std::int64_t nodes,
                            std::int64_t* local, std::int64_t* node_out, counters* c) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < seeds;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t s = seed[i];
    if (s < 0 || s >= nodes) {
      report(c, sample_seed_out_of_range);
      node_out[i] = 0;
      continue;
    }
    node_out[i] = s;
    // A seed given twice keeps its last position, as local[seed] = arange does.
    atomicMax(reinterpret_cast<long long*>(&local[s]), static_cast<long long>(i));
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) c->frontier[0] = seeds;
}

__global__ void flag_kernel(const std::int64_t* colptr, std::int64_t edges,
                            const std::int64_t* node_out, std::int64_t fanout, int hop,
                            std::int64_t slots, unsigned char* flags, counters* c) {
  const std::int64_t lo = frontier_start(c, hop), size = c->frontier[hop];
  for (std::int64_t t = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; t < slots;
       t += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t i = t / fanout, j = t % fanout;
    bool take = false;
    if (i < size) {
      const std::int64_t v = node_out[lo + i];
      const std::int64_t start = colptr[v], degree = colptr[v + 1] - start;
      // Each node's edges inside row: else none of them is drawn.
      const bool fits = start >= 0 && degree >= 0 && degree <= edges - start;
      if (!fits && j == 0) report(c, sample_bad_colptr);
      take = fits && j < degree;
    }
    flags[t] = take ? 1 : 0;
  }
}

// The claim of the slot at position k: below -1, so a seen node's id
// (>= 0) and an unseen node (-1) tell apart from it.
__device__ std::int64_t claim_of(std::int64_t k) { return -2 - k; }

__global__ void edge_kernel(const std::int64_t* colptr, const std::int64_t* row,
                            std::int64_t nodes, const std::int64_t* node_out, std::int64_t fanout,
                            int hop, std::uint64_t key, const std::int64_t* slot,
                            std::int64_t capacity, std::int64_t* local, std::int64_t* edge_out,
                            std::int64_t* src_out, std::int64_t* dst_out, counters* c) {
  const std::int64_t lo = frontier_start(c, hop), count = c->edges[hop];
  for (std::int64_t k = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
       k < count && k < capacity; k += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = slot[k], i = t / fanout, j = t % fanout;
    const std::int64_t v = node_out[lo + i];
    const std::int64_t start = colptr[v], degree = colptr[v + 1] - start;
    const std::int64_t e = start + (degree <= fanout ? j : pick(key, hop, lo + i, j, degree));
    const std::int64_t u = row[e];
    edge_out[k] = e;
    dst_out[k] = lo + i;  // the frontier's batch-local ids are their positions
    if (u < 0 || u >= nodes) {
      report(c, sample_row_out_of_range);
      src_out[k] = v;  // a valid node, so the kernels after stay in bounds
      continue;
    }
    src_out[k] = u;  // the node id for now; relabel_kernel makes it local
    // First claim wins: unseen (-1), or claimed by a later slot.
    auto* at = reinterpret_cast<unsigned long long*>(&local[u]);
    const std::int64_t mine = claim_of(k);
    std::int64_t seen = local[u];
    while (seen < 0 && (seen == -1 || seen < mine)) {
      const auto prev = static_cast<std::int64_t>(atomicCAS(
          at, static_cast<unsigned long long>(seen), static_cast<unsigned long long>(mine)));
      if (prev == seen) break;
      seen = prev;
    }
  }
}

__global__ void first_kernel(const std::int64_t* src_out, const std::int64_t* local, int hop,
                             std::int64_t capacity, unsigned char* flags, const counters* c) {
  const std::int64_t count = c->edges[hop];
  for (std::int64_t k = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; k < capacity;
       k += std::int64_t{gridDim.x} * blockDim.x)
    flags[k] = (k < count && local[src_out[k]] == claim_of(k)) ? 1 : 0;
}

__global__ void adopt_kernel(const std::int64_t* fresh, int hop, std::int64_t capacity,
                             std::int64_t* local, std::int64_t* node_out, const counters* c) {
  const std::int64_t at = frontier_start(c, hop + 1), count = c->frontier[hop + 1];
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
       j < count && j < capacity; j += std::int64_t{gridDim.x} * blockDim.x) {
    node_out[at + j] = fresh[j];
    local[fresh[j]] = at + j;
  }
}

__global__ void relabel_kernel(const std::int64_t* local, int hop, std::int64_t capacity,
                               std::int64_t* src_out, const counters* c) {
  const std::int64_t count = c->edges[hop];
  for (std::int64_t k = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
       k < count && k < capacity; k += std::int64_t{gridDim.x} * blockDim.x)
    src_out[k] = local[src_out[k]];
}

// Every node of the batch back to unseen (node_out holds only valid ids: a
// seed out of range was written as node 0), and the sizes gathered.
__global__ void reset_kernel(const std::int64_t* node_out, int hops, std::int64_t capacity,
                             std::int64_t* local, counters* c) {
  const std::int64_t total = frontier_start(c, hops + 1);
  for (std::int64_t x = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
       x < total && x < capacity; x += std::int64_t{gridDim.x} * blockDim.x)
    local[node_out[x]] = -1;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int h = 0; h <= hops; ++h) c->sizes[h] = c->frontier[h];
    for (int h = 0; h < hops; ++h) c->sizes[hops + 1 + h] = c->edges[h];
    c->sizes[2 * hops + 1] = c->problem;
  }
}

// The workspace's parts, each aligned.
struct layout {
  std::size_t flags = 0, slot = 0, fresh = 0, counts = 0, temp = 0, total = 0;
  std::size_t temp_bytes = 0;
};

std::int64_t widest_hop(const sample_capacity& cap) {
  std::int64_t widest = 1;
  for (std::size_t h = 0; h + 1 < cap.edge_offset.size(); ++h)
    widest = std::max(widest, cap.edge_offset[h + 1] - cap.edge_offset[h]);
  return widest;
}

layout layout_of(const sample_capacity& cap) {
  const std::int64_t widest = widest_hop(cap);
  // CUB's scratch for the widest select (the same for both kinds: same
  // value type, same flags).
  std::size_t temp = 0;
  WARPSTORE_CUDA_TRY(cub::DeviceSelect::Flagged(
      nullptr, temp, thrust::counting_iterator<std::int64_t>(0),
      static_cast<const unsigned char*>(nullptr), static_cast<std::int64_t*>(nullptr),
      static_cast<std::int64_t*>(nullptr), widest, cudaStream_t{}));
  layout l;
  l.temp_bytes = temp;
  l.flags = 0;
  l.slot = l.flags + aligned(static_cast<std::size_t>(widest));
  l.fresh = l.slot + aligned(static_cast<std::size_t>(widest) * 8);
  l.counts = l.fresh + aligned(static_cast<std::size_t>(widest) * 8);
  l.temp = l.counts + aligned(sizeof(counters));
  l.total = l.temp + aligned(temp);
  return l;
}

void check_fanouts(const std::vector<std::int64_t>& fanouts) {
  if (fanouts.empty() || fanouts.size() > static_cast<std::size_t>(counters::max_hops))
    throw invalid_argument("sample: 1 to " + std::to_string(counters::max_hops) +
                           " hops, got " + std::to_string(fanouts.size()));
  for (std::int64_t f : fanouts)
    if (f <= 0)
      throw invalid_argument("sample: each fanout must be positive (all neighbours: use the "
                             "PyTorch path), got " + std::to_string(f));
}

}  // namespace

sample_capacity sample_capacity_of(std::int64_t seeds, std::int64_t graph_nodes,
                                   const std::vector<std::int64_t>& fanouts) {
  check_fanouts(fanouts);
  if (seeds < 0 || graph_nodes < 0)
    throw invalid_argument("sample: negative seeds or nodes");
  constexpr std::int64_t limit = std::int64_t{1} << 40;
  sample_capacity cap;
  std::int64_t frontier = seeds, nodes = seeds, edges = 0;
  cap.edge_offset.push_back(0);
  for (std::int64_t f : fanouts) {
    if (frontier > limit / f)
      throw invalid_argument("sample: " + std::to_string(frontier) + " nodes with fanout " +
                             std::to_string(f) + " overflow the sampler's capacity");
    const std::int64_t hop = frontier * f;
    edges += hop;
    cap.edge_offset.push_back(edges);
    frontier = std::min(hop, graph_nodes);
    nodes += frontier;
  }
  cap.nodes = nodes;
  return cap;
}

std::size_t sample_workspace_bytes(std::int64_t seeds, std::int64_t graph_nodes,
                                   const std::vector<std::int64_t>& fanouts) {
  return layout_of(sample_capacity_of(seeds, graph_nodes, fanouts)).total;
}

void sample_hops(const sample_job& job, cudaStream_t stream) {
  const sample_capacity cap = sample_capacity_of(job.seeds, job.nodes, job.fanouts);
  const layout l = layout_of(cap);
  if (job.workspace_bytes < l.total)
    throw invalid_argument("sample: a workspace of " + std::to_string(job.workspace_bytes) +
                           " bytes, " + std::to_string(l.total) + " needed");
  if (job.colptr == nullptr || job.row == nullptr || job.local == nullptr ||
      job.node_out == nullptr || job.edge_out == nullptr || job.src_out == nullptr ||
      job.dst_out == nullptr || job.workspace == nullptr || job.sizes == nullptr ||
      (job.seeds > 0 && job.seed == nullptr))
    throw invalid_argument("sample: a null address");
  auto* base = static_cast<unsigned char*>(job.workspace);
  auto* flags = base + l.flags;
  auto* slot = reinterpret_cast<std::int64_t*>(base + l.slot);
  auto* fresh = reinterpret_cast<std::int64_t*>(base + l.fresh);
  auto* c = reinterpret_cast<counters*>(base + l.counts);
  void* temp = base + l.temp;
  const int hops = static_cast<int>(job.fanouts.size());

  WARPSTORE_CUDA_TRY(cudaMemsetAsync(c, 0, sizeof(counters), stream));
  seed_kernel<<<blocks_for(job.seeds), block_threads, 0, stream>>>(
      job.seed, job.seeds, job.nodes, job.local, job.node_out, c);
  WARPSTORE_CHECK_LAUNCH();
  for (int h = 0; h < hops; ++h) {
    const std::int64_t f = job.fanouts[static_cast<std::size_t>(h)];
    const std::int64_t off = cap.edge_offset[static_cast<std::size_t>(h)];
    const std::int64_t slots = cap.edge_offset[static_cast<std::size_t>(h) + 1] - off;
    std::int64_t* edge = job.edge_out + off;
    std::int64_t* src = job.src_out + off;
    std::int64_t* dst = job.dst_out + off;
    if (slots == 0) continue;  // its counts stay the 0 of the memset above
    flag_kernel<<<blocks_for(slots), block_threads, 0, stream>>>(
        job.colptr, job.edges, job.node_out, f, h, slots, flags, c);
    WARPSTORE_CHECK_LAUNCH();
    std::size_t temp_bytes = l.temp_bytes;
    WARPSTORE_CUDA_TRY(cub::DeviceSelect::Flagged(
        temp, temp_bytes, thrust::counting_iterator<std::int64_t>(0), flags, slot, &c->edges[h],
        slots, stream));
    edge_kernel<<<blocks_for(slots), block_threads, 0, stream>>>(
        job.colptr, job.row, job.nodes, job.node_out, f, h, job.key, slot, slots, job.local,
        edge, src, dst, c);
    WARPSTORE_CHECK_LAUNCH();
    first_kernel<<<blocks_for(slots), block_threads, 0, stream>>>(src, job.local, h, slots, flags,
                                                                  c);
    WARPSTORE_CHECK_LAUNCH();
    temp_bytes = l.temp_bytes;
    WARPSTORE_CUDA_TRY(cub::DeviceSelect::Flagged(temp, temp_bytes, src, flags, fresh,
                                                  &c->frontier[h + 1], slots, stream));
    const std::int64_t next_cap = std::min(slots, job.nodes);
    adopt_kernel<<<blocks_for(next_cap), block_threads, 0, stream>>>(fresh, h, next_cap,
                                                                     job.local, job.node_out, c);
    WARPSTORE_CHECK_LAUNCH();
    relabel_kernel<<<blocks_for(slots), block_threads, 0, stream>>>(job.local, h, slots, src, c);
    WARPSTORE_CHECK_LAUNCH();
  }
  reset_kernel<<<blocks_for(cap.nodes), block_threads, 0, stream>>>(job.node_out, hops,
                                                                     cap.nodes, job.local, c);
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaMemcpyAsync(job.sizes, c->sizes,
                                     static_cast<std::size_t>(2 * hops + 2) * sizeof(std::int64_t),
                                     cudaMemcpyDeviceToHost, stream));
}

}  // namespace warpstore::python
