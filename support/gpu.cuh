// GPU plumbing of the benchmarks: checked launches, event timers, launch sizing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "warpstore/cuda_check.h"  // WARPSTORE_CUDA_TRY for every CUDA call
#include "warpstore/runtime.h"

namespace warpstore::bench {

// After a launch: raises if the launch was refused (cudaGetLastError) or the
// kernel failed while running (cudaDeviceSynchronize), naming `kernel`.
void check_launch(const char* kernel);
// Like check_launch without waiting for the kernel to finish.
void check_launched(const char* kernel);

// Times work on a stream with a pair of CUDA events.
class gpu_timer {
 public:
  gpu_timer();
  ~gpu_timer();
  gpu_timer(const gpu_timer&) = delete;
  gpu_timer& operator=(const gpu_timer&) = delete;
  void start(cudaStream_t stream = nullptr);
  void stop(cudaStream_t stream = nullptr);
  // Waits for the stop event; seconds between start and stop.
  double seconds() const;

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Blocks of `block_threads` that keep every multiprocessor full with `kernel`.
unsigned resident_blocks(const void* kernel, int block_threads, std::size_t shared_bytes = 0);
template <class Kernel>
unsigned resident_blocks(Kernel* kernel, int block_threads, std::size_t shared_bytes = 0) {
  return resident_blocks(reinterpret_cast<const void*>(kernel), block_threads, shared_bytes);
}

}  // namespace warpstore::bench
