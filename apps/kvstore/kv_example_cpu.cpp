// warpstore-kv-cpu: the key-value store example on the CPU target (example.h).
#include <cstdio>
#include <exception>

#include "apps/kvstore/example.h"
#include "apps/kvstore/launch.h"

int main(int argc, char** argv) {
  try {
    return warpstore::kv::run_example<warpstore::kv::cpu_launch>(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warpstore-kv-cpu: error: %s\n", e.what());
    return 1;
  }
}
