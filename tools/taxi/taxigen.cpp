// warpstore-taxigen DIR --rows 256M [--layout zone|shuffled] [--seed N]:
// writes the taxi-trip table of support/taxi/taxi.h, one float32 file per column.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>

#include "support/args.h"
#include "support/cli_main.h"
#include "support/taxi/taxi.h"
#include "support/timing.h"

int main(int argc, char** argv) {
  namespace wb = warpstore::bench;
  wb::arg_parser p("warpstore-taxigen", "Write a taxi-trip-like table, one float32 file per column");
  p.common()
      .positional("DIR", "output directory")
      .option("rows", "N", "256M", "trips")
      .option("layout", "NAME", "zone", "zone (grouped by pickup zone) or shuffled")
      .option("seed", "N", "1", "generator seed")
      .option("threads", "N", warpstore::tools::hardware_threads(), "threads");
  return warpstore::tools::cli_main(p, "warpstore-taxigen", argc, argv, [&](const wb::parsed_args& a) {
    wb::stopwatch clock;
    const std::string dir = a.positional("DIR");
    const auto layout = warpstore::taxi::parse_layout(a.str("layout"));
    warpstore::taxi::write_table(dir, a.count("rows"), static_cast<std::uint64_t>(a.integer("seed")), layout,
                                 static_cast<unsigned>(std::max<std::uint64_t>(1, a.count("threads"))));
    std::printf("%s: %llu rows x %zu columns, layout %s, written in %.2f s\n", dir.c_str(),
                static_cast<unsigned long long>(warpstore::taxi::table_rows(dir)),
                warpstore::taxi::columns.size(), warpstore::taxi::to_string(layout), clock.seconds());
    return 0;
  });
}
