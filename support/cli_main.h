// The main() of the dataset tools and the apps: parse, answer --help, run,
// and turn errors into exit codes (2: usage, 1: error; the body's own code
// otherwise), each message prefixed with the program's name.
#pragma once

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "support/args.h"

namespace warpstore::tools {

// The default of every --threads option: the machine's hardware threads.
inline std::string hardware_threads() {
  return std::to_string(std::max(1u, std::thread::hardware_concurrency()));
}

// `run(parsed_args)` returns the exit status. A program with subcommands
// prints its help when none is given.
template <class Run>
int cli_main(const bench::arg_parser& parser, const char* program, int argc, char** argv, Run&& run) {
  try {
    const bench::parsed_args a = parser.parse(argc, argv);
    if (a.wants_help()) {
      std::fputs(parser.help(a.command()).c_str(), stdout);
      return 0;
    }
    return run(a);
  } catch (const bench::usage_error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace warpstore::tools
