// warpstore-pagerank: apps/pagerank on the GPU (warp-per-32-vertices kernels,
// checkpoints from inside a kernel).
#include "apps/graph/gpu_launch.cuh"
#include "apps/pagerank/app.h"

int main(int argc, char** argv) {
  using namespace warpstore::apps;
  const auto parser = pagerank::make_parser("warpstore-pagerank");
  return warpstore::tools::cli_main(parser, "warpstore-pagerank", argc, argv,
                                    [](const warpstore::bench::parsed_args& a) {
                                      return pagerank::run_app(a, gpu_launch{});
                                    });
}
