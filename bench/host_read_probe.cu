// Probe: how fast can GPU warps read random rows of host memory over PCIe,
// and what limits it? Random rows of 128 B .. 4 KiB, one warp a row, from
// a region of 64 MiB or 2 GiB of host memory held four ways:
//   hostalloc  cudaHostAlloc (what torch pin_memory and the copy of the
//              memory controller use)
//   anon4k     malloc'd 4 KiB pages, cudaHostRegister
//   anon2m     2 MiB transparent huge pages (madvise), cudaHostRegister
//   pagecache  a file's page-cache pages mapped and registered read-only
//              (the memory controller's default for a read-only file)
//   vmm_host   host memory from the driver's virtual memory management
//              (cuMemCreate with a host location, mapped at the allocation
//              granularity into the GPU's address space): whether the GPU's
//              translations of host memory still miss when the driver maps
//              it in large pages
// Prints rows/s and GB/s per case. Build: the CMake target host-read-probe,
// or nvcc -O3 -std=c++20 -arch=sm_90 -Iinclude bench/host_read_probe.cu -lcuda.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "warpstore/detail/hash.cuh"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

#define CKD(x)                                                                       \
  do {                                                                               \
    CUresult r_ = (x);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char* m_ = nullptr;                                                      \
      cuGetErrorString(r_, &m_);                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, m_ ? m_ : "?"); \
      return nullptr;                                                                \
    }                                                                                \
  } while (0)

// `bytes` of host memory through cuMemCreate (location `type`, id 0),
// mapped for device 0 (and for the CPU where the driver allows it: *cpu
// says whether it did). nullptr, with the reason printed, where refused.
void* vmm_host(std::uint64_t bytes, CUmemLocationType type, bool* cpu, std::size_t* gran) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = 0;
  CKD(cuMemGetAllocationGranularity(gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CUmemGenericAllocationHandle h{};
  CKD(cuMemCreate(&h, bytes, &prop, 0));
  CUdeviceptr va = 0;
  CKD(cuMemAddressReserve(&va, bytes, *gran, 0, 0));
  CKD(cuMemMap(va, bytes, 0, h, 0));
  CUmemAccessDesc acc{};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CKD(cuMemSetAccess(va, bytes, &acc, 1));
  CUmemAccessDesc host{};
  host.location.type = type;
  host.location.id = 0;
  host.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  *cpu = cuMemSetAccess(va, bytes, &host, 1) == CUDA_SUCCESS;
  return reinterpret_cast<void*>(va);
}

// Reads `reads` rows, one warp a row, row k being pick(k); XORs them into a
// sink so the reads stay.
template <class Pick>
__global__ void probe(const uint4* src, unsigned row_bytes, std::uint64_t reads, Pick pick,
                      unsigned long long* sink) {
  const unsigned lane = threadIdx.x & 31;
  const std::uint64_t warp = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  const unsigned words = row_bytes / 16;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (std::uint64_t k = warp; k < reads; k += warps) {
    const uint4* row = src + pick(k) * words;
    for (unsigned w = lane; w < words; w += 32) {
      const uint4 v = row[w];
      acc.x ^= v.x;
      acc.y ^= v.y;
      acc.z ^= v.z;
      acc.w ^= v.w;
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) atomicAdd(sink, 1ull);
}

// Rows by hash: random over the region.
struct hashed {
  std::uint64_t rows, seed;
  __device__ std::uint64_t operator()(std::uint64_t k) const {
    return warpstore::detail::murmur3_fmix64(k + seed) % rows;
  }
};
// Rows from a list in device memory.
struct listed {
  const std::uint64_t* idx;
  __device__ std::uint64_t operator()(std::uint64_t k) const { return idx[k]; }
};

// The best of three timings of launch(t), t = 0, 1, 2, in milliseconds.
template <class Launch>
float best_ms(Launch launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  float best = 1e30f;
  for (int t = 0; t < 3; ++t) {
    CK(cudaEventRecord(a));
    launch(t);
    CK(cudaGetLastError());
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (ms < best) best = ms;
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return best;
}

// Batches of `batch` random rows of the 2 GiB region, each batch one launch
// of resident warps, its rows in random order or sorted.
double run_batches(const void* dev, std::uint64_t bytes, unsigned row_bytes, std::uint64_t batch,
                   bool sorted, unsigned long long* sink) {
  const std::uint64_t rows = bytes / row_bytes;
  const std::uint64_t total = std::max<std::uint64_t>(batch * 4, 1u << 21);
  std::vector<std::uint64_t> h(total);
  std::uint64_t x = 88172645463325252ull;
  for (auto& v : h) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = x % rows;
  }
  if (sorted)
    for (std::uint64_t b = 0; b < total; b += batch)
      std::sort(h.begin() + b, h.begin() + std::min(total, b + batch));
  std::uint64_t* d = nullptr;
  CK(cudaMalloc(&d, total * 8));
  CK(cudaMemcpy(d, h.data(), total * 8, cudaMemcpyHostToDevice));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned blocks =
      static_cast<unsigned>(std::min<std::uint64_t>(sms * 8ull, (batch + 7) / 8));
  const float best = best_ms([&](int) {
    for (std::uint64_t o = 0; o < total; o += batch)
      probe<<<blocks, 256>>>(static_cast<const uint4*>(dev), row_bytes, std::min(batch, total - o),
                             listed{d + o}, sink);
  });
  CK(cudaFree(d));
  return total / (best * 1e-3);
}

double run(const void* dev, std::uint64_t bytes, unsigned row_bytes, unsigned long long* sink) {
  const std::uint64_t rows = bytes / row_bytes;
  const std::uint64_t reads = row_bytes >= 4096 ? (1u << 20) : (4u << 20);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  probe<<<sms * 8, 256>>>(static_cast<const uint4*>(dev), row_bytes, reads / 4, hashed{rows, 7},
                          sink);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const float best = best_ms([&](int t) {
    probe<<<sms * 8, 256>>>(static_cast<const uint4*>(dev), row_bytes, reads,
                            hashed{rows, 100u + static_cast<unsigned>(t)}, sink);
  });
  return reads / (best * 1e-3);
}

int main(int argc, char** argv) {
  const std::string file = argc > 1 ? argv[1] : "/tmp/host_read_probe.dat";
  const std::uint64_t big = 2ull << 30, small = 64ull << 20;
  unsigned long long* sink = nullptr;
  CK(cudaMalloc(&sink, sizeof *sink));
  struct held {
    const char* name;
    void* p;
    bool device_va = false;  // p is already the GPU's address (vmm)
  };
  std::vector<held> kinds;
  void* ha = nullptr;
  CK(cudaHostAlloc(&ha, big, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(ha, 1, big);
  kinds.push_back({"hostalloc", ha});
  void* a4 = std::aligned_alloc(4096, big);
  madvise(a4, big, MADV_NOHUGEPAGE);
  std::memset(a4, 2, big);
  CK(cudaHostRegister(a4, big, cudaHostRegisterMapped | cudaHostRegisterPortable));
  kinds.push_back({"anon4k", a4});
  void* a2 = std::aligned_alloc(2u << 20, big);
  const int thp = madvise(a2, big, MADV_HUGEPAGE);
  std::memset(a2, 3, big);
  CK(cudaHostRegister(a2, big, cudaHostRegisterMapped | cudaHostRegisterPortable));
  kinds.push_back({"anon2m", a2});
  {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(big)) != 0) return 1;
    std::vector<char> buf(1 << 24, 4);
    for (std::uint64_t o = 0; o < big; o += buf.size())
      if (pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(o)) != (ssize_t)buf.size())
        return 1;
    void* m = mmap(nullptr, big, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) return 1;
    CK(cudaHostRegister(
        m, big, cudaHostRegisterMapped | cudaHostRegisterPortable | cudaHostRegisterReadOnly));
    kinds.push_back({"pagecache", m});
    close(fd);
  }
  for (auto [name, type] : {std::pair{"vmm_host", CU_MEM_LOCATION_TYPE_HOST},
                            std::pair{"vmm_numa", CU_MEM_LOCATION_TYPE_HOST_NUMA}}) {
    bool cpu = false;
    std::size_t gran = 0;
    void* v = vmm_host(big, type, &cpu, &gran);
    std::printf("%s: %s, granularity %zu KiB, CPU access %s\n", name, v ? "mapped" : "refused",
                gran >> 10, cpu ? "yes" : "no");
    if (v == nullptr) continue;
    if (cpu)
      std::memset(v, 5, big);
    else
      CK(cudaMemset(v, 5, big));
    CK(cudaDeviceSynchronize());
    kinds.push_back({name, v, true});
  }
  std::printf("THP madvise rc %d; AnonHugePages after touch:\n", thp);
  std::fflush(stdout);
  if (std::system("grep -E 'AnonHugePages|Hugepagesize' /proc/meminfo") != 0) return 1;
  std::printf("%-10s %-6s %6s %12s %9s\n", "memory", "region", "row", "Mrows/s", "GB/s");
  for (const held& h : kinds)
    for (std::uint64_t region : {small, big})
      for (unsigned row : {128u, 512u, 4096u}) {
        void* dev = h.p;
        if (!h.device_va) CK(cudaHostGetDevicePointer(&dev, h.p, 0));
        const double r = run(dev, region, row, sink);
        std::printf("%-10s %-6s %6u %12.1f %9.1f\n", h.name, region == big ? "2GiB" : "64MiB", row,
                    r / 1e6, r * row / 1e9);
        std::fflush(stdout);
      }
  std::printf("region sizes (hostalloc, random rows):\n");
  for (std::uint64_t region : {128ull << 20, 256ull << 20, 512ull << 20, 1ull << 30})
    for (unsigned row : {128u, 512u}) {
      void* dev = nullptr;
      CK(cudaHostGetDevicePointer(&dev, kinds[0].p, 0));
      const double r = run(dev, region, row, sink);
      std::printf("hostalloc %5llu MiB %4u %10.1f Mrows/s %6.1f GB/s\n",
                  (unsigned long long)(region >> 20), row, r / 1e6, r * row / 1e9);
    }
  std::printf("batches of random rows over 2 GiB, unsorted vs sorted (hostalloc, pagecache, vmm):\n");
  for (std::size_t kk = 0; kk < kinds.size(); ++kk)
    for (unsigned row : {128u, 512u})
      for (std::uint64_t batch : {1024ull, 8192ull, 65536ull, 524288ull})
        for (bool sorted : {false, true}) {
          if (kk == 1 || kk == 2) continue;  // anon4k, anon2m: as hostalloc
          void* dev = kinds[kk].p;
          if (!kinds[kk].device_va) CK(cudaHostGetDevicePointer(&dev, kinds[kk].p, 0));
          const double r = run_batches(dev, big, row, batch, sorted, sink);
          std::printf("%-10s %4u batch %7llu %-8s %10.1f Mrows/s %6.1f GB/s\n", kinds[kk].name, row,
                      (unsigned long long)batch, sorted ? "sorted" : "random", r / 1e6,
                      r * row / 1e9);
          std::fflush(stdout);
        }
  std::remove(file.c_str());
  return 0;
}
