// Host runtime services that differ between the GPU build and the CPU target:
// memory allocation, copies and error checking. The GPU build implements them
// with the CUDA runtime (src/runtime/cuda.cpp), the CPU target with plain
// host memory (src/runtime/cpu.cpp). Everything above this layer is shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "warpstore/error.h"

// Failed CUDA calls and broken runtime invariants raise warpstore::runtime_error
// (warpstore/error.h).
namespace warpstore {

namespace runtime {

// True when this build drives a GPU (false on the CPU target).
bool gpu_build();
// Name of the device kernels run on ("NVIDIA H100 80GB HBM3", or "CPU").
std::string device_name();
// Number of multiprocessors (GPU) or hardware threads (CPU).
unsigned processor_count();
// Free memory where cache lines live.
std::size_t free_device_memory();

// Memory kernels read and write at full speed (GPU memory).
void* alloc_device(std::size_t bytes);
void free_device(void* p) noexcept;
// Pinned host memory that kernels can address directly (same pointer); its
// contents are undefined (make_host_mapped zeroes it unless told not to).
void* alloc_host_mapped(std::size_t bytes);
void free_host_mapped(void* p) noexcept;
// Pinned host memory for the copy engines only (bounce buffers: kernels do
// not address it). Anonymous memory in 2 MiB pages where the kernel gives
// them, faulted in by the calling thread, then pinned with
// cudaHostRegister: cudaHostAlloc of the bulk reader's 12 lanes' buffers
// (96 MiB) took 36 to 70 ms on the H200 machine, one thread after another,
// all of it in a first bulk read's time. Not inherited by a forked
// child (MADV_DONTFORK, as pinned memory should not be). Contents undefined
// (zero in practice). Falls back to cudaHostAlloc where the driver will not
// register. The CPU target: ordinary memory.
void* alloc_host_pinned(std::size_t bytes);
void free_host_pinned(void* p) noexcept;
// Pins [p, p + bytes) of this process's memory (page-aligned; a file's
// read-only mapping too) so kernels can address it at the same pointer;
// false, leaving nothing pinned and no error pending, where the driver
// refuses (no UVA, a mapping it cannot pin). The CPU target pins nothing:
// false.
bool register_host(void* p, std::size_t bytes, bool read_only);
// The same for a device's registers mapped into this process (a PCI BAR
// through VFIO): cudaHostRegisterIoMemory, so GPU stores reach the device
// as MMIO writes. Undone by unregister_host. The CPU target: false.
bool register_io_memory(void* p, std::size_t bytes);
void unregister_host(void* p) noexcept;

void memset_device(void* dst, int value, std::size_t bytes);
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
// Waits for all device work and raises any asynchronous error.
void synchronize();

// A copy engine queue a controller thread uses to move bytes between device
// memory and its host buffers: enqueue any number of copies, then launch()
// issues them as one batch (cudaMemcpyBatchAsync: one driver call, not one
// per copy) and returns its mark, which done() checks without waiting; or
// wait() issues them and waits for everything launched.
class copy_stream {
 public:
  copy_stream();
  ~copy_stream();
  copy_stream(const copy_stream&) = delete;
  copy_stream& operator=(const copy_stream&) = delete;
  void enqueue_to_device(void* dst, const void* src, std::size_t bytes);
  void enqueue_to_host(void* dst, const void* src, std::size_t bytes);
  // Issues the copies enqueued since the last launch; the mark of the
  // batch (the previous mark if none was enqueued). At most `max_batches`
  // batches are in flight: a launch past that waits for the oldest first.
  std::uint64_t launch();
  // Whether every batch up to `mark` finished; raises a failed copy's error.
  bool done(std::uint64_t mark);
  void wait();
  static constexpr std::size_t max_batches = 64;

 private:
  void* stream_ = nullptr;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<std::size_t> sizes_;
  std::vector<void*> events_;  // events_[mark % max_batches] follows batch `mark`
  std::uint64_t launched_ = 0, finished_ = 0;
};

// Whether `p` is memory only the GPU reaches at full speed (device or
// managed memory), as opposed to host memory a system call can write. Always
// false on the CPU target.
bool is_device_memory(const void* p);
// The CUDA device current in the calling thread; -1 on the CPU target.
int current_device();

// One thread's ordered copies from its host buffers (pinned, on the GPU
// target) to any memory, on a CUDA stream of its own, with two marks that
// tell when the copies queued before them are done: what a bulk read uses to
// read a chunk into one buffer while the copy engine drains the other. Made
// on the current device; use_device() makes that device current in another
// thread. On the CPU target a copy is a memcpy, done before copy() returns.
class upload_stream {
 public:
  upload_stream();
  ~upload_stream();
  upload_stream(const upload_stream&) = delete;
  upload_stream& operator=(const upload_stream&) = delete;
  int device() const;
  void use_device() const;
  // Later copies start after the work queued so far on `stream` (a
  // cudaStream_t; 0 the legacy default stream).
  void after(std::uintptr_t stream);
  // Queues a copy; `src` must stay as it is until a mark set after it is
  // waited for.
  void copy(void* dst, const void* src, std::size_t bytes);
  // mark(k) (k 0 or 1) marks the copies queued so far; wait_mark(k) blocks
  // until they are done (at once if mark(k) was never set).
  void mark(unsigned k);
  void wait_mark(unsigned k);
  // Blocks until every queued copy is done.
  void synchronize();

 private:
  void release() noexcept;
  int device_ = 0;
  void* stream_ = nullptr;
  void* marks_[2] = {nullptr, nullptr};
  void* order_ = nullptr;  // records the caller's stream for after()
};

// Owning handles for the two kinds of memory.
struct device_deleter {
  void operator()(void* p) const noexcept { free_device(p); }
};
struct host_mapped_deleter {
  void operator()(void* p) const noexcept { free_host_mapped(p); }
};
struct host_pinned_deleter {
  void operator()(void* p) const noexcept { free_host_pinned(p); }
};
template <class T>
using device_ptr = std::unique_ptr<T, device_deleter>;
template <class T>
using host_mapped_ptr = std::unique_ptr<T, host_mapped_deleter>;
template <class T>
using host_pinned_ptr = std::unique_ptr<T, host_pinned_deleter>;

template <class T>
device_ptr<T> make_device(std::size_t count, bool zero = true) {
  auto* p = static_cast<T*>(alloc_device(count * sizeof(T)));
  if (zero) memset_device(p, 0, count * sizeof(T));
  return device_ptr<T>(p);
}
template <class T>
host_mapped_ptr<T> make_host_mapped(std::size_t count, bool zero = true) {
  auto* p = static_cast<T*>(alloc_host_mapped(count * sizeof(T)));
  if (zero) std::memset(static_cast<void*>(p), 0, count * sizeof(T));
  return host_mapped_ptr<T>(p);
}
template <class T>
host_pinned_ptr<T> make_host_pinned(std::size_t count) {
  return host_pinned_ptr<T>(static_cast<T*>(alloc_host_pinned(count * sizeof(T))));
}

}  // namespace runtime
}  // namespace warpstore
