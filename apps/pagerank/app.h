// warpstore-pagerank (GPU) and warpstore-pagerank-cpu (the CPU target): the
// same program. PageRank on a CSR graph (a file from warpstore-graphgen, or a
// Kronecker graph generated in memory) that checkpoints ranks and iteration
// every --every iterations and, when started again with the same
// --checkpoint file, resumes from the newest checkpoint:
//
//   warpstore-pagerank --scale 20 --iterations 30 --every 5 --checkpoint /tmp/pr.ckpt --stop-after 12
//   warpstore-pagerank --scale 20 --iterations 30 --every 5 --checkpoint /tmp/pr.ckpt --verify
//
// The first run stops abruptly (_exit, nothing cleaned up) after 12
// iterations, 10 of them checkpointed; the second resumes at iteration 10,
// finishes, and with --verify compares every rank bit for bit with a CPU run
// from scratch.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "apps/pagerank/pagerank.cuh"
#include "support/args.h"
#include "support/cli_main.h"
#include "support/graph/csr.h"

namespace warpstore::apps::pagerank {

inline bench::arg_parser make_parser(const char* program) {
  bench::arg_parser p(program, "PageRank that checkpoints its state and resumes after a crash");
  p.common()
      .option("graph", "PATH", "", "CSR graph file (warpstore-graphgen); default: a generated Kronecker graph")
      .option("scale", "N", "16", "generated graph: 2^N vertices")
      .option("edge-factor", "N", "16", "generated graph: edges per vertex")
      .option("seed", "N", "1", "generated graph: seed")
      .option("checkpoint", "PATH", "", "checkpoint file (created if missing; resumed from if it holds one)")
      .option("iterations", "N", "20", "iterations in all (counting those of earlier runs)")
      .option("every", "N", "5", "checkpoint every N iterations (and after the last)")
      .option("damping", "D", "0.85", "damping factor")
      .option("line-size", "BYTES", "64K", "largest command (the checkpoint's chunk)")
      .option("controller", "KIND", "host", "host | memory")
      .option("stop-after", "N", "0", "leave abruptly (_exit(3)) after N iterations of this run, to try the resume")
      .flag("host-form", "checkpoint with the host form (default: from inside a kernel)")
      .flag("fresh", "delete the checkpoint file first")
      .flag("verify", "compare the final ranks bit for bit with a CPU run from scratch")
      .option("threads", "N", tools::hardware_threads(), "threads for loading or generating the graph");
  return p;
}

template <class Launch>
int run_app(const bench::parsed_args& a, Launch launch) {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  const std::string ckpt = a.str("checkpoint");
  if (ckpt.empty()) throw bench::usage_error("--checkpoint PATH is required");
  const std::uint64_t iterations = a.count("iterations");
  const std::uint64_t every = a.count("every");
  if (every == 0) throw bench::usage_error("--every must be at least 1");
  const unsigned threads = static_cast<unsigned>(std::max<std::uint64_t>(1, a.count("threads")));
  const double damping = a.real("damping");

  auto t0 = clock::now();
  graph::csr g;
  if (!a.str("graph").empty()) {
    g = graph::read_csr(a.str("graph"), threads);
  } else {
    graph::kronecker_params kp;
    kp.scale = static_cast<unsigned>(a.count("scale"));
    kp.edge_factor = static_cast<unsigned>(a.count("edge-factor"));
    kp.seed = a.count("seed");
    g = graph::generate_kronecker(kp, false, threads);
  }
  std::printf("graph: %llu vertices, %llu edges (%.2f s)\n",
              static_cast<unsigned long long>(g.vertices),
              static_cast<unsigned long long>(g.edges()), seconds(t0));

  options opts = options::from_environment();
  opts.line_size = static_cast<std::uint32_t>(a.size("line-size"));
  opts.controller = parse_controller(a.str("controller"));
  if (a.flag("fresh")) ::unlink(ckpt.c_str());

  solver<Launch> s(launch, g, damping, ckpt, opts);
  t0 = clock::now();
  std::uint64_t k = s.resume();
  if (k == 0)
    std::printf("%s holds no checkpoint: starting from 1/n\n", ckpt.c_str());
  else
    std::printf("resumed from %s: iteration %llu (%.3f s)\n", ckpt.c_str(),
                static_cast<unsigned long long>(k), seconds(t0));
  if (k > iterations)
    std::printf("the checkpoint is past --iterations %llu: nothing to do\n",
                static_cast<unsigned long long>(iterations));

  const std::uint64_t state_bytes = g.vertices * 8 + sizeof(state_header);
  const std::uint64_t stop_after = a.count("stop-after");
  double step_s = 0, ckpt_s = 0;
  std::uint64_t steps = 0, ckpts = 0;
  while (k < iterations) {
    t0 = clock::now();
    s.step();
    ++k;
    ++steps;
    step_s += seconds(t0);
    if (k % every == 0 || k == iterations) {
      t0 = clock::now();
      const std::uint64_t seq = a.flag("host-form") ? s.checkpoint() : s.checkpoint_in_kernel();
      const double dt = seconds(t0);
      ckpt_s += dt;
      ++ckpts;
      std::printf("iteration %llu: checkpoint %llu committed (%.3f s, %.2f GB/s)\n",
                  static_cast<unsigned long long>(k), static_cast<unsigned long long>(seq), dt,
                  static_cast<double>(state_bytes) / dt / 1e9);
    }
    if (stop_after != 0 && steps == stop_after) {
      std::printf("stopping abruptly after %llu iterations of this run (at iteration %llu)\n",
                  static_cast<unsigned long long>(steps), static_cast<unsigned long long>(k));
      std::fflush(stdout);
      ::_exit(3);
    }
  }
  if (steps != 0)
    std::printf("%llu iterations in %.3f s (%.2f ms each), %llu checkpoints in %.3f s\n",
                static_cast<unsigned long long>(steps), step_s, step_s / static_cast<double>(steps) * 1e3,
                static_cast<unsigned long long>(ckpts), ckpt_s);

  const std::vector<double> ranks = s.ranks();
  std::vector<std::uint32_t> order(g.vertices);
  std::iota(order.begin(), order.end(), 0u);
  const std::size_t top = std::min<std::size_t>(5, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](std::uint32_t x, std::uint32_t y) { return ranks[x] > ranks[y]; });
  for (std::size_t i = 0; i < top; ++i)
    std::printf("  rank %zu: vertex %u  %.9e\n", i + 1, order[i], ranks[order[i]]);

  if (a.flag("verify")) {
    t0 = clock::now();
    const std::vector<double> want = reference(g, s.iteration(), damping);
    std::uint64_t bad = 0, first = 0;
    for (std::uint64_t v = 0; v < g.vertices; ++v)
      if (std::memcmp(&ranks[v], &want[v], 8) != 0 && bad++ == 0) first = v;
    if (bad != 0) {
      std::printf("VERIFY FAILED: %llu of %llu ranks differ from the CPU reference after %llu iterations (first: vertex %llu, %.17g vs %.17g)\n",
                  static_cast<unsigned long long>(bad), static_cast<unsigned long long>(g.vertices),
                  static_cast<unsigned long long>(s.iteration()), static_cast<unsigned long long>(first),
                  ranks[first], want[first]);
      return 1;
    }
    std::printf("verified: every rank equals the CPU reference bit for bit after %llu iterations (%.2f s)\n",
                static_cast<unsigned long long>(s.iteration()), seconds(t0));
  }
  return 0;
}

}  // namespace warpstore::apps::pagerank
