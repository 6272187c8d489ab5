// Neighbour sampling on the GPU (sample.cu; the CUDA module only): every hop
// of one batch in a few kernels a hop, queued on the caller's stream with no
// host synchronisation between hops; the sizes come back in one copy at the
// end. warpstore/feature_store.py's TorchNeighborSampler uses it where the
// graph sits in GPU memory; its plain-PyTorch path is the reference.
//
// A hop takes, for each frontier node, every in-neighbour where it has at
// most `fanout` of them, else `fanout` uniform draws with replacement (the
// draws: a counter-based hash of the key, the hop, the node's position and
// the draw, so a batch's sample depends on its key alone). The nodes not
// seen before join the batch in the order of their first sampled edge.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace warpstore::python {

// What one batch's sampling reads and writes. Every pointer is GPU memory
// on the current device except `sizes` (pinned host memory).
struct sample_job {
  const std::int64_t* colptr = nullptr;  // CSC: nodes + 1 offsets into row
  const std::int64_t* row = nullptr;     // CSC: the source node of each edge
  std::int64_t nodes = 0;                // nodes in the graph
  std::int64_t edges = 0;                // row's entries
  std::int64_t* local = nullptr;  // nodes entries, each -1 on entry; so again on return
  const std::int64_t* seed = nullptr;
  std::int64_t seeds = 0;
  std::vector<std::int64_t> fanouts;  // each > 0
  std::uint64_t key = 0;              // the draws' key
  // Outputs, capacities from sample_capacity(): the batch's nodes (seeds
  // first), and per hop h at offset edge_offset(h): the edge ids (CSC
  // positions), the sources' and the targets' batch-local ids.
  std::int64_t* node_out = nullptr;
  std::int64_t* edge_out = nullptr;
  std::int64_t* src_out = nullptr;
  std::int64_t* dst_out = nullptr;
  void* workspace = nullptr;  // sample_workspace_bytes()
  std::size_t workspace_bytes = 0;
  // Copied when the stream reaches the end (pinned host memory): [0, hops]: the nodes each hop
  // added (the seeds first); [hops + 1, 2 hops]: each hop's edges;
  // [2 hops + 1]: 0, or the first problem found (sample_problem).
  std::int64_t* sizes = nullptr;
};

// What sizes[2 hops + 1] may hold.
enum sample_problem : std::int64_t {
  sample_ok = 0,
  sample_seed_out_of_range = 1,  // a seed is not a node of the graph
  sample_bad_colptr = 2,  // a node's edges reach outside row (a negative degree, say)
  sample_row_out_of_range = 3,   // an edge's source is not a node of the graph
};

// Upper bounds of one batch: nodes (node_out's entries) and each hop's
// edges (hop h at edge_offset[h]; the last entry: the total).
struct sample_capacity {
  std::int64_t nodes = 0;
  std::vector<std::int64_t> edge_offset;
};
sample_capacity sample_capacity_of(std::int64_t seeds, std::int64_t graph_nodes,
                                   const std::vector<std::int64_t>& fanouts);

std::size_t sample_workspace_bytes(std::int64_t seeds, std::int64_t graph_nodes,
                                   const std::vector<std::int64_t>& fanouts);

// Queues the whole sample on `stream`; raises invalid_argument for a job
// that does not fit its capacities, runtime_error for a CUDA failure.
// The caller waits for the stream before it reads `sizes`.
void sample_hops(const sample_job& job, cudaStream_t stream);

}  // namespace warpstore::python
