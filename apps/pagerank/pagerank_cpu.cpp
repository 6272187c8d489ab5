// warpstore-pagerank-cpu: apps/pagerank on the CPU target (std::threads as warps).
#include "apps/graph/launch.h"
#include "apps/pagerank/app.h"

int main(int argc, char** argv) {
  using namespace warpstore::apps;
  const auto parser = pagerank::make_parser("warpstore-pagerank-cpu");
  return warpstore::tools::cli_main(parser, "warpstore-pagerank-cpu", argc, argv,
                                    [](const warpstore::bench::parsed_args& a) {
                                      return pagerank::run_app(a, cpu_launch{});
                                    });
}
