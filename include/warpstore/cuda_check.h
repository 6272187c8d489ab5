// Checking CUDA calls and kernel launches (GPU build only): every failure
// raises warpstore::runtime_error naming the call, the place and the error.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "warpstore/runtime.h"

namespace warpstore {

inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    throw runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace warpstore

#define WARPSTORE_CUDA_TRY(call) ::warpstore::cuda_check((call), #call, __FILE__, __LINE__)
// After a kernel launch: raises launch errors now and execution errors at the next sync.
#define WARPSTORE_CHECK_LAUNCH() WARPSTORE_CUDA_TRY(cudaGetLastError())
