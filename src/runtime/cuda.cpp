// GPU build of the runtime: every CUDA call is checked and raises
// warpstore::runtime_error naming the call and the error.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "warpstore/cuda_check.h"
#include "warpstore/runtime.h"

namespace warpstore::runtime {

bool gpu_build() { return true; }

std::string device_name() {
  int dev = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  WARPSTORE_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

unsigned processor_count() {
  int dev = 0, n = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&dev));
  WARPSTORE_CUDA_TRY(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return static_cast<unsigned>(n);
}

std::size_t free_device_memory() {
  std::size_t free_bytes = 0, total = 0;
  WARPSTORE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

void* alloc_device(std::size_t bytes) {
  void* p = nullptr;
  WARPSTORE_CUDA_TRY(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}
void free_device(void* p) noexcept { cudaFree(p); }

void* alloc_host_mapped(std::size_t bytes) {
  void* p = nullptr;
  WARPSTORE_CUDA_TRY(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes,
                                     cudaHostAllocMapped | cudaHostAllocPortable));
  // With unified addressing the device pointer of mapped memory is the host
  // pointer; kernels rely on that.
  void* dev = nullptr;
  WARPSTORE_CUDA_TRY(cudaHostGetDevicePointer(&dev, p, 0));
  if (dev != p) {
    cudaFreeHost(p);
    throw runtime_error("mapped host memory has a different device address: no UVA");
  }
  return p;
}
void free_host_mapped(void* p) noexcept { cudaFreeHost(p); }

namespace {
constexpr std::size_t huge_page = std::size_t{2} << 20;
// alloc_host_pinned's registered blocks and their lengths; a block not here
// came from its cudaHostAlloc fallback.
std::mutex pinned_mutex;
std::unordered_map<void*, std::size_t>& pinned_blocks() {
  static auto* blocks = new std::unordered_map<void*, std::size_t>();  // never destroyed
  return *blocks;
}
// Anonymous memory of `length` (a multiple of huge_page) starting on a huge
// page, so the kernel may back it with 2 MiB pages; nullptr if none.
void* map_huge_aligned(std::size_t length) {
  void* raw = ::mmap(nullptr, length + huge_page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = (base + huge_page - 1) / huge_page * huge_page;
  if (start > base) ::munmap(raw, start - base);
  const std::uintptr_t tail = base + length + huge_page - (start + length);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(start + length), tail);
  return reinterpret_cast<void*>(start);
}
}  // namespace

void* alloc_host_pinned(std::size_t bytes) {
  const std::size_t length = ((bytes == 0 ? 1 : bytes) + huge_page - 1) / huge_page * huge_page;
  if (length < bytes) throw std::bad_alloc();
  if (void* p = map_huge_aligned(length)) {
    (void)::madvise(p, length, MADV_HUGEPAGE);  // a hint: 4 KiB pages work too
    // A forked child neither copies nor sees pinned pages (cudaHostAlloc's
    // memory behaves the same); the library's objects in a child make their own.
    (void)::madvise(p, length, MADV_DONTFORK);
    // Fault the pages in here, where threads making buffers at once zero
    // theirs in parallel: left to cudaHostRegister, the faults run inside
    // the driver's lock, one thread after another (the bulk reader's 24
    // buffers of 4 MiB from 12 threads: 21 to 26 ms all told, 12 ms with
    // each thread faulting its own first).
    auto* bytes_p = static_cast<volatile unsigned char*>(p);
    for (std::size_t off = 0; off < length; off += 4096) bytes_p[off] = 0;
    if (cudaHostRegister(p, length, cudaHostRegisterPortable) == cudaSuccess) {
      try {
        std::lock_guard<std::mutex> lock(pinned_mutex);
        pinned_blocks().emplace(p, length);
        return p;
      } catch (...) {
        cudaHostUnregister(p);
        ::munmap(p, length);
        throw;
      }
    }
    (void)cudaGetLastError();  // refused: leave no error for the next call to find
    ::munmap(p, length);
  }
  void* p = nullptr;
  WARPSTORE_CUDA_TRY(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable));
  return p;
}

void free_host_pinned(void* p) noexcept {
  if (p == nullptr) return;
  std::size_t length = 0;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    auto& blocks = pinned_blocks();
    const auto it = blocks.find(p);
    if (it != blocks.end()) {
      length = it->second;
      blocks.erase(it);
    }
  }
  if (length == 0) {
    cudaFreeHost(p);
    return;
  }
  cudaHostUnregister(p);
  ::munmap(p, length);
}

namespace {
// Registers [p, p + bytes) with `flags` (mapped among them); false, with no
// CUDA error left behind, if the driver refuses or the device address is
// not the host's (no UVA).
bool register_mapped(void* p, std::size_t bytes, unsigned flags) {
  if (cudaHostRegister(p, bytes, flags) != cudaSuccess) {
    (void)cudaGetLastError();  // refused: leave no error for the next call to find
    return false;
  }
  void* dev = nullptr;
  if (cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess || dev != p) {
    (void)cudaGetLastError();
    (void)cudaHostUnregister(p);
    return false;
  }
  return true;
}
}  // namespace

bool register_host(void* p, std::size_t bytes, bool read_only) {
  return register_mapped(p, bytes,
                         cudaHostRegisterMapped | cudaHostRegisterPortable |
                             (read_only ? cudaHostRegisterReadOnly : 0u));
}
bool register_io_memory(void* p, std::size_t bytes) {
  return register_mapped(
      p, bytes, cudaHostRegisterIoMemory | cudaHostRegisterMapped | cudaHostRegisterPortable);
}
void unregister_host(void* p) noexcept { cudaHostUnregister(p); }

void memset_device(void* dst, int value, std::size_t bytes) {
  WARPSTORE_CUDA_TRY(cudaMemset(dst, value, bytes));
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
}
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  WARPSTORE_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  WARPSTORE_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}
void synchronize() {
  WARPSTORE_CUDA_TRY(cudaGetLastError());
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
}

copy_stream::copy_stream() {
  cudaStream_t s = nullptr;
  WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}
copy_stream::~copy_stream() {
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
void copy_stream::enqueue_to_device(void* dst, const void* src, std::size_t bytes) {
  dsts_.push_back(dst);
  srcs_.push_back(src);
  sizes_.push_back(bytes);
}
// Unified addressing: the batch finds each copy's direction from its pointers.
void copy_stream::enqueue_to_host(void* dst, const void* src, std::size_t bytes) {
  enqueue_to_device(dst, src, bytes);
}
std::uint64_t copy_stream::launch() {
  if (dsts_.empty()) return launched_;
  auto stream = static_cast<cudaStream_t>(stream_);
  if (events_.empty()) {
    events_.resize(max_batches);
    for (void*& e : events_) {
      cudaEvent_t ev = nullptr;
      WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      e = ev;
    }
  }
  if (launched_ - finished_ == max_batches) {  // the oldest batch's event is needed again
    WARPSTORE_CUDA_TRY(
        cudaEventSynchronize(static_cast<cudaEvent_t>(events_[finished_ % max_batches])));
    ++finished_;
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t attr_index = 0;
  const cudaError_t issued = cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(),
                                                  dsts_.size(), &attr, &attr_index, 1, stream);
  dsts_.clear();
  srcs_.clear();
  sizes_.clear();
  WARPSTORE_CUDA_TRY(issued);
  WARPSTORE_CUDA_TRY(
      cudaEventRecord(static_cast<cudaEvent_t>(events_[launched_ % max_batches]), stream));
  return ++launched_;
}
bool copy_stream::done(std::uint64_t mark) {
  while (finished_ < mark) {
    const cudaError_t e =
        cudaEventQuery(static_cast<cudaEvent_t>(events_[finished_ % max_batches]));
    if (e == cudaErrorNotReady) return false;
    WARPSTORE_CUDA_TRY(e);
    ++finished_;
  }
  return true;
}
void copy_stream::wait() {
  launch();
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  finished_ = launched_;
}

bool is_device_memory(const void* p) {
  cudaPointerAttributes attr{};
  WARPSTORE_CUDA_TRY(cudaPointerGetAttributes(&attr, p));
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

int current_device() {
  int dev = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&dev));
  return dev;
}

upload_stream::upload_stream() {
  WARPSTORE_CUDA_TRY(cudaGetDevice(&device_));
  cudaStream_t s = nullptr;
  WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  try {
    for (void*& m : marks_) {
      cudaEvent_t e = nullptr;
      WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      m = e;
    }
    cudaEvent_t e = nullptr;
    WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    order_ = e;
  } catch (...) {
    release();
    throw;
  }
}
upload_stream::~upload_stream() { release(); }
void upload_stream::release() noexcept {
  for (void*& m : marks_)
    if (m != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(m));
  if (order_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(order_));
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  marks_[0] = marks_[1] = order_ = stream_ = nullptr;
}
int upload_stream::device() const { return device_; }
void upload_stream::use_device() const { WARPSTORE_CUDA_TRY(cudaSetDevice(device_)); }
void upload_stream::after(std::uintptr_t stream) {
  auto order = static_cast<cudaEvent_t>(order_);
  WARPSTORE_CUDA_TRY(cudaEventRecord(order, reinterpret_cast<cudaStream_t>(stream)));
  WARPSTORE_CUDA_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), order, 0));
}
void upload_stream::copy(void* dst, const void* src, std::size_t bytes) {
  WARPSTORE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                     static_cast<cudaStream_t>(stream_)));
}
void upload_stream::mark(unsigned k) {
  WARPSTORE_CUDA_TRY(
      cudaEventRecord(static_cast<cudaEvent_t>(marks_[k & 1]), static_cast<cudaStream_t>(stream_)));
}
void upload_stream::wait_mark(unsigned k) {
  WARPSTORE_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(marks_[k & 1])));
}
void upload_stream::synchronize() {
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

}  // namespace warpstore::runtime
