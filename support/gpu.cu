#include "support/gpu.cuh"

#include <string>

namespace warpstore::bench {

void check_launched(const char* kernel) {
  cuda_check(cudaGetLastError(), (std::string("launch of ") + kernel).c_str(), __FILE__, __LINE__);
}

void check_launch(const char* kernel) {
  check_launched(kernel);
  cuda_check(cudaDeviceSynchronize(), (std::string(kernel) + " (running)").c_str(), __FILE__, __LINE__);
}

gpu_timer::gpu_timer() {
  WARPSTORE_CUDA_TRY(cudaEventCreate(&start_));
  WARPSTORE_CUDA_TRY(cudaEventCreate(&stop_));
}
gpu_timer::~gpu_timer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}
void gpu_timer::start(cudaStream_t stream) { WARPSTORE_CUDA_TRY(cudaEventRecord(start_, stream)); }
void gpu_timer::stop(cudaStream_t stream) { WARPSTORE_CUDA_TRY(cudaEventRecord(stop_, stream)); }
double gpu_timer::seconds() const {
  WARPSTORE_CUDA_TRY(cudaEventSynchronize(stop_));
  float ms = 0;
  WARPSTORE_CUDA_TRY(cudaEventElapsedTime(&ms, start_, stop_));
  return ms / 1e3;
}

unsigned resident_blocks(const void* kernel, int block_threads, std::size_t shared_bytes) {
  int device = 0, sms = 0, per_sm = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&device));
  WARPSTORE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  WARPSTORE_CUDA_TRY(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, shared_bytes));
  if (per_sm <= 0) throw runtime_error("a kernel cannot run with " + std::to_string(block_threads) + " threads per block");
  return static_cast<unsigned>(per_sm * sms);
}

}  // namespace warpstore::bench
