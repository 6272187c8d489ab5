// CPU target of the runtime: "device" and "mapped" memory are ordinary host
// memory, copies are memcpy.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "warpstore/runtime.h"

namespace warpstore::runtime {

namespace {
// Page-aligned zeroed memory. Large blocks come straight from the kernel
// (mmap): their pages are zero and cost nothing until touched, so a cache of
// 1 GiB (the default) whose lines are never read takes no time to open and
// no memory (a memset of it took a second of system time a process). Small
// ones (a log's statuses, an error record) come from the heap, without a
// system call each. Either way the block's length is kept in a page of its
// own in front of what the caller gets.
constexpr std::size_t page = 4096;
constexpr std::size_t mapped_from = std::size_t{1} << 20;
void* alloc_zeroed(std::size_t bytes) {
  const std::size_t rounded = bytes == 0 ? page : (bytes + page - 1) / page * page;
  if (rounded < bytes || rounded + page < rounded) throw std::bad_alloc();
  void* base;
  if (rounded >= mapped_from) {
    base = ::mmap(nullptr, rounded + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
  } else {
    base = std::aligned_alloc(page, rounded + page);
    if (base == nullptr) throw std::bad_alloc();
    std::memset(static_cast<std::byte*>(base) + page, 0, rounded);
  }
  *static_cast<std::size_t*>(base) = rounded + page;
  return static_cast<std::byte*>(base) + page;
}
void free_zeroed(void* p) noexcept {
  if (p == nullptr) return;
  std::byte* base = static_cast<std::byte*>(p) - page;
  const std::size_t length = *reinterpret_cast<std::size_t*>(base);
  if (length - page >= mapped_from)
    ::munmap(base, length);
  else
    std::free(base);
}
}  // namespace

bool gpu_build() { return false; }
std::string device_name() { return "CPU"; }
unsigned processor_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}
std::size_t free_device_memory() {
  // What the CPU target may use for cache lines: the memory the kernel says
  // is available (MemAvailable: free plus reclaimable page cache), or free
  // pages where /proc is not mounted.
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f) != nullptr)
      found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<std::size_t>(kib) * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0)
    return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
  return std::size_t{1} << 40;  // unknown: let the allocation decide
}

void* alloc_device(std::size_t bytes) { return alloc_zeroed(bytes); }
void free_device(void* p) noexcept { free_zeroed(p); }
void* alloc_host_mapped(std::size_t bytes) { return alloc_zeroed(bytes); }
void free_host_mapped(void* p) noexcept { free_zeroed(p); }
void* alloc_host_pinned(std::size_t bytes) { return alloc_zeroed(bytes); }
void free_host_pinned(void* p) noexcept { free_zeroed(p); }
// The CPU target reads what it would pin with plain loads: a file truncated
// under a mapping would kill the process (SIGBUS) where a GPU reads the
// pinned pages it kept, so the memory controller copies here instead.
bool register_host(void*, std::size_t, bool) { return false; }
bool register_io_memory(void*, std::size_t) { return false; }
void unregister_host(void*) noexcept {}

void memset_device(void* dst, int value, std::size_t bytes) { std::memset(dst, value, bytes); }
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
void synchronize() {}

copy_stream::copy_stream() = default;
copy_stream::~copy_stream() = default;
void copy_stream::enqueue_to_device(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void copy_stream::enqueue_to_host(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}
std::uint64_t copy_stream::launch() { return finished_ = ++launched_; }
bool copy_stream::done(std::uint64_t) { return true; }  // copies are done when enqueued
void copy_stream::wait() {}

bool is_device_memory(const void*) { return false; }
int current_device() { return -1; }

upload_stream::upload_stream() = default;
upload_stream::~upload_stream() = default;
int upload_stream::device() const { return -1; }
void upload_stream::use_device() const {}
void upload_stream::after(std::uintptr_t) {}
void upload_stream::copy(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void upload_stream::mark(unsigned) {}
void upload_stream::wait_mark(unsigned) {}
void upload_stream::synchronize() {}

}  // namespace warpstore::runtime
