// The demo on the GPU: a million threads gather random elements.
#include <exception>

#include "demo.h"
#include "warpstore/cuda_check.h"

namespace {

__global__ void gather(warpstore::array_ref<std::uint64_t> a, std::uint64_t reads,
                       unsigned long long* wrong) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  unsigned long long bad = 0;
  for (std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; k < reads; k += stride) {
    const std::uint64_t i = warpstore::tools::pattern_word(k * 8, 12345) % a.size();
    bad += a[i] != warpstore::tools::pattern_word(i * 8);
  }
  if (bad) atomicAdd(wrong, bad);
}

}  // namespace

int main(int argc, char** argv) try {
  demo::config c = demo::parse(argc, argv, 4ull << 30, 16'000'000);
  demo::ensure_file(c);
  warpstore::array<std::uint64_t> a(c.path, 0, c.opts);
  unsigned long long* wrong = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&wrong, sizeof *wrong));
  WARPSTORE_CUDA_TRY(cudaMemset(wrong, 0, sizeof *wrong));
  cudaEvent_t start, stop;
  WARPSTORE_CUDA_TRY(cudaEventCreate(&start));
  WARPSTORE_CUDA_TRY(cudaEventCreate(&stop));
  WARPSTORE_CUDA_TRY(cudaEventRecord(start));
  gather<<<4096, 256>>>(a.ref(), c.reads, wrong);
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaEventRecord(stop));
  WARPSTORE_CUDA_TRY(cudaEventSynchronize(stop));
  warpstore::runtime::synchronize();
  float ms = 0;
  WARPSTORE_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
  unsigned long long bad = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpy(&bad, wrong, sizeof bad, cudaMemcpyDeviceToHost));
  cudaFree(wrong);
  a.check();
  const std::string dev = warpstore::runtime::device_name();
  return demo::report(c, dev.c_str(), a.shared_controller()->name(), ms / 1e3, bad, a.stats());
} catch (const std::exception& e) {
  std::fprintf(stderr, "warpstore-demo: %s\n", e.what());
  return 2;
}
