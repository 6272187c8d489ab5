// The checkpoint crash workload: apps/pagerank checkpointing
// after every iteration, so committed state k is the ranks after k
// iterations. One source for both targets: checkpoint_workload_cpu.cpp and
// checkpoint_workload_gpu.cu instantiate it with their launch.
//
//   prepare  creates the checkpoint file and commits state 0 (ranks 1/n)
//   run      resumes from the newest checkpoint and commits state after state
//            from a kernel (the device form), acknowledging each once durable
//   recover  restores the newest checkpoint whose record and data verify and
//            compares it bit for bit with a CPU run of that many iterations
//            from scratch (no shared state with the run that crashed)
//
// The graph is small (2048 vertices, about 16 K edges), generated from a
// fixed seed, so 50 states cost a few milliseconds to recompute.
#pragma once

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apps/pagerank/pagerank.cuh"
#include "support/graph/csr.h"
#include "tests/crash/crash_workload.h"

namespace warpstore::crash {

namespace checkpoint_detail {

inline constexpr double damping = 0.85;
inline constexpr std::uint64_t vertices = 2048;
inline constexpr std::uint64_t edges = 8192;  // stored both ways

inline graph::csr make_graph() { return graph::generate_uniform(vertices, edges, 0x5EED, false, 2); }
inline std::string file_of(const env& e) { return e.dir + "/pagerank.ckpt"; }

template <class Launch>
class checkpoint_workload final : public workload {
 public:
  explicit checkpoint_workload(Launch launch) : launch_(launch), graph_(make_graph()) {}

  const char* name() const override { return "checkpoint"; }

  void prepare(const env& e) override {
    const std::string path = file_of(e);
    ::unlink(path.c_str());
    apps::pagerank::solver<Launch> s(launch_, graph_, damping, path, e.opts, e.open);
    if (s.resume() != 0) throw std::logic_error("checkpoint workload: a fresh file held a checkpoint");
    s.checkpoint_in_kernel();  // state 0
  }

  void run(const env& e, std::uint64_t states, const committed_fn& committed) override {
    apps::pagerank::solver<Launch> s(launch_, graph_, damping, file_of(e), e.opts, e.open);
    std::uint64_t k = s.resume();
    if (!s.restored())
      throw std::runtime_error("checkpoint workload: " + file_of(e) + " holds no checkpoint (prepare first)");
    while (k < states) {
      s.step();
      ++k;
      s.checkpoint_in_kernel();  // returns once durable
      if (committed) committed(k);
    }
  }

  verdict recover(const env& e) override {
    verdict v;
    apps::pagerank::solver<Launch> s(launch_, graph_, damping, file_of(e), e.opts, e.open);
    std::uint64_t k = 0;
    try {
      k = s.resume();  // the newest checkpoint whose record and data verify; checks the header
    } catch (const std::exception& ex) {
      // No checkpoint's data verifies, a header of another graph, or the
      // file unreadable: no committed state recovered.
      v.mismatches = vertices * 8 + sizeof(apps::pagerank::state_header);
      v.detail = std::string("recovery failed: ") + ex.what();
      return v;
    }
    if (!s.restored()) {
      v.mismatches = vertices * 8 + sizeof(apps::pagerank::state_header);
      v.detail = file_of(e) + " holds no valid checkpoint (state 0 was committed by prepare)";
      return v;
    }
    v.state = k;
    const std::vector<double> got = s.ranks();
    const std::vector<double> want = apps::pagerank::reference(graph_, k, damping);
    std::uint64_t first = ~0ull;
    for (std::uint64_t i = 0; i < vertices; ++i) {
      const auto* a = reinterpret_cast<const unsigned char*>(&got[i]);
      const auto* b = reinterpret_cast<const unsigned char*>(&want[i]);
      for (int j = 0; j < 8; ++j)
        if (a[j] != b[j]) {
          ++v.mismatches;
          if (first == ~0ull) first = i;
        }
    }
    if (v.mismatches != 0)
      v.detail = std::to_string(v.mismatches) + " bytes of the ranks differ from state " +
                 std::to_string(k) + " (first: vertex " + std::to_string(first) + ")";
    return v;
  }

 private:
  Launch launch_;
  graph::csr graph_;
};

}  // namespace checkpoint_detail

}  // namespace warpstore::crash
