// warpstore-reliability-cpu: the reliability study on the CPU target, where
// a "warp" is one std::thread (see detail/platform.cuh).
#include <cstdio>
#include <exception>
#include <thread>

#include "bench/reliability/cpu_reader.h"

int main(int argc, char** argv) {
  try {
    warpstore::reliability::target t;
    t.name = "cpu";
    t.device = "CPU target (std::thread lanes)";
    t.read = warpstore::reliability::read_on_threads;
    return warpstore::reliability::run_study(argc, argv, t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warpstore-reliability-cpu: error: %s\n", e.what());
    return 3;
  }
}
