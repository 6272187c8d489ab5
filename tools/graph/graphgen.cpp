// warpstore-graphgen: makes CSR graph files (format: support/graph/csr.h).
//
//   warpstore-graphgen kronecker OUT --scale 25 [--edge-factor 16] [--weighted]
//   warpstore-graphgen uniform OUT --vertices 1M --edges 16M [--weighted]
//   warpstore-graphgen edges IN OUT [--symmetrize]     (text edge list)
//   warpstore-graphgen mtx IN OUT [--symmetrize]       (Matrix Market)
//   warpstore-graphgen info FILE [--check]
#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>

#include "support/args.h"
#include "support/cli_main.h"
#include "support/graph/csr.h"
#include "support/timing.h"

namespace {

namespace wb = warpstore::bench;
namespace wg = warpstore::graph;

void describe(const std::string& path, const wg::csr_header& h) {
  std::printf("%s: %llu vertices, %llu edges (CSR entries), %s%s, %s\n", path.c_str(),
              static_cast<unsigned long long>(h.vertices), static_cast<unsigned long long>(h.edges),
              h.is_symmetric() ? "symmetric" : "directed", h.is_weighted() ? ", weighted" : "",
              wb::format_size(h.file_bytes).c_str());
}

int run(const wb::parsed_args& a) {
  const unsigned threads = static_cast<unsigned>(std::max<std::uint64_t>(1, a.count("threads")));
  const std::string& cmd = a.command();
  if (cmd == "info") {
    const std::string path = a.positional("FILE");
    describe(path, wg::read_csr_header(path));
    if (a.flag("check")) {
      const wg::csr g = wg::read_csr(path, threads);
      std::printf("offsets and neighbours check out (%llu edges)\n",
                  static_cast<unsigned long long>(g.edges()));
    }
    return 0;
  }
  wb::stopwatch clock;
  wg::csr g;
  std::string out;
  if (cmd == "kronecker") {
    wg::kronecker_params p;
    p.scale = static_cast<unsigned>(a.integer("scale"));
    p.edge_factor = static_cast<unsigned>(a.integer("edge-factor"));
    p.seed = static_cast<std::uint64_t>(a.integer("seed"));
    g = wg::generate_kronecker(p, a.flag("weighted"), threads);
    out = a.positional("OUT");
  } else if (cmd == "uniform") {
    g = wg::generate_uniform(a.count("vertices"), a.count("edges"),
                             static_cast<std::uint64_t>(a.integer("seed")), a.flag("weighted"), threads);
    out = a.positional("OUT");
  } else if (cmd == "edges" || cmd == "mtx") {
    const std::string in = a.positional("IN");
    g = cmd == "edges" ? wg::import_edge_list(in, a.flag("symmetrize"), threads)
                       : wg::import_matrix_market(in, a.flag("symmetrize"), threads);
    out = a.positional("OUT");
  }
  const double built = clock.seconds();
  wg::write_csr(out, g, threads);
  describe(out, wg::read_csr_header(out));
  std::printf("built in %.2f s, written in %.2f s with %u threads\n", built, clock.seconds() - built,
              threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  wb::arg_parser p("warpstore-graphgen", "Make CSR graph files for the graph apps");
  p.common().option("threads", "N", warpstore::tools::hardware_threads(), "worker threads");
  p.add_command("kronecker", "Graph500 Kronecker graph (A=0.57, B=0.19, C=0.19), stored symmetric")
      .positional("OUT", "output CSR file")
      .option("scale", "S", "20", "2^S vertices")
      .option("edge-factor", "F", "16", "F * 2^S generated edges (each stored both ways)")
      .option("seed", "N", "1", "generator seed")
      .flag("weighted", "add integer-valued weights in [1, 64]");
  p.add_command("uniform", "uniform random graph, stored symmetric")
      .positional("OUT", "output CSR file")
      .option("vertices", "N", "1M", "vertices")
      .option("edges", "M", "16M", "generated edges (each stored both ways)")
      .option("seed", "N", "1", "generator seed")
      .flag("weighted", "add integer-valued weights in [1, 64]");
  p.add_command("edges", "import a text edge list (\"from to [weight]\", 0-based)")
      .positional("IN", "edge list")
      .positional("OUT", "output CSR file")
      .flag("symmetrize", "store every edge both ways");
  p.add_command("mtx", "import a Matrix Market coordinate file")
      .positional("IN", "Matrix Market file")
      .positional("OUT", "output CSR file")
      .flag("symmetrize", "store every edge both ways (symmetric files always are)");
  p.add_command("info", "print a CSR file's header").positional("FILE", "CSR file").flag("check", "read and check every offset and neighbour");
  return warpstore::tools::cli_main(p, "warpstore-graphgen", argc, argv, run);
}
