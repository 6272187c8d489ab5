// warpstore-kv: the key-value store example on the GPU (example.h).
#include <cstdio>
#include <exception>

#include "apps/kvstore/example.h"
#include "apps/kvstore/gpu_launch.cuh"

int main(int argc, char** argv) {
  try {
    return warpstore::kv::run_example<warpstore::kv::gpu_launch>(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warpstore-kv: error: %s\n", e.what());
    return 1;
  }
}
