// Portability layer: the queue, cache and array code is written once and
// compiled by nvcc for the GPU and by the host compiler for CPU tests.
// On the CPU target a "warp" is one std::thread (warp size 1): coalescing
// degenerates to every lane leading its own group, which keeps the protocol
// identical while needing no lane barriers.
#pragma once

#include <cuda/atomic>
#include <cstdint>

#if defined(__CUDACC__)
#define WARPSTORE_HD __host__ __device__
#define WARPSTORE_DEVICE __device__
#else
#define WARPSTORE_HD
#define WARPSTORE_DEVICE
#endif

// The read path's rare branches (a dirty victim's write-back, an eviction
// in one trip, an error's record), called rather than inlined in device code
// where WARPSTORE_COLD_OUT_OF_LINE is set: by the CMake option of that name
// for every target, or by one target for its own kernels (the graph bench,
// apps/CMakeLists.txt). Only device code changes, so host code is the same
// in every translation unit. Inlined, they double the code of a kernel that
// reads through the cache: the graph bench's kernels are 63 K instructions
// and 248 to 255 registers a lane with them inline, 29 K and 138 to 146
// without (ptxas, sm_90). Timed on an H200 (2026-12-04, BENCHMARKS.md): alone
// it changed nothing measurable in the graph bench, with a 128-register cap
// it made the graph's kernels over the memory controller 7 to 14 % faster;
// but the Python gathers' hits of 400 B rows and more ran two to three times
// slower with it, so it is off by default. Why (SASS): the calls take the
// caller's objects by reference (`this`, a deadline&), which puts the
// kernel's array parameter in local memory, and the hit's row copy then
// loads through generic pointers, one word an iteration.
#if defined(__CUDA_ARCH__) && defined(WARPSTORE_COLD_OUT_OF_LINE) && WARPSTORE_COLD_OUT_OF_LINE
#define WARPSTORE_COLD __noinline__
#else
#define WARPSTORE_COLD
#endif

// nvcc's host pass hands pragmas to the host compiler, which would warn.
#if defined(__CUDA_ARCH__)
#define WARPSTORE_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define WARPSTORE_UNROLL
#else
#define WARPSTORE_UNROLL _Pragma("GCC unroll 8")
#endif

#if defined(__CUDA_ARCH__)
#define WARPSTORE_ON_GPU 1
#else
#define WARPSTORE_ON_GPU 0
#include <chrono>
#include <thread>
#endif

namespace warpstore::detail {

#if defined(WARPSTORE_PERTURB_ATOMICS) && !WARPSTORE_ON_GPU
// Test builds of the CPU target only (the perturbed-protocol test): every
// atomic step of the queue, cache and controller protocol first calls
// perturb_atomic_step(), defined by the test, which yields or sleeps at
// random, so interleavings a quiet machine never shows get exercised.
void perturb_atomic_step();

template <class T, cuda::thread_scope Scope>
struct perturbed_atomic_ref : cuda::atomic_ref<T, Scope> {
  using base = cuda::atomic_ref<T, Scope>;
  using order = cuda::std::memory_order;
  explicit perturbed_atomic_ref(T& r) : base(r) {}
  T load(order o = cuda::std::memory_order_seq_cst) const {
    perturb_atomic_step();
    return base::load(o);
  }
  void store(T v, order o = cuda::std::memory_order_seq_cst) const {
    perturb_atomic_step();
    base::store(v, o);
  }
// Read-modify-writes: the hook, then the operation itself.
#define WARPSTORE_PERTURBED_RMW(op)                                        \
  T op(T v, order o = cuda::std::memory_order_seq_cst) const {             \
    perturb_atomic_step();                                                 \
    return base::op(v, o);                                                 \
  }
#define WARPSTORE_PERTURBED_CAS(op)                                        \
  bool op(T& e, T d, order s, order f) const {                             \
    perturb_atomic_step();                                                 \
    return base::op(e, d, s, f);                                           \
  }                                                                        \
  bool op(T& e, T d, order o = cuda::std::memory_order_seq_cst) const {    \
    perturb_atomic_step();                                                 \
    return base::op(e, d, o);                                              \
  }
  WARPSTORE_PERTURBED_RMW(exchange)
  WARPSTORE_PERTURBED_RMW(fetch_add)
  WARPSTORE_PERTURBED_RMW(fetch_sub)
  WARPSTORE_PERTURBED_RMW(fetch_or)
  WARPSTORE_PERTURBED_RMW(fetch_and)
  WARPSTORE_PERTURBED_CAS(compare_exchange_strong)
  WARPSTORE_PERTURBED_CAS(compare_exchange_weak)
#undef WARPSTORE_PERTURBED_RMW
#undef WARPSTORE_PERTURBED_CAS
};
template <class T>
using device_atomic = perturbed_atomic_ref<T, cuda::thread_scope_device>;
template <class T>
using system_atomic = perturbed_atomic_ref<T, cuda::thread_scope_system>;
#else
template <class T>
using device_atomic = cuda::atomic_ref<T, cuda::thread_scope_device>;
template <class T>
using system_atomic = cuda::atomic_ref<T, cuda::thread_scope_system>;
#endif

using cuda::std::memory_order_acq_rel;
using cuda::std::memory_order_acquire;
using cuda::std::memory_order_relaxed;
using cuda::std::memory_order_release;
using cuda::std::memory_order_seq_cst;

// Makes what a relaxed system-scope load observed (a completion written by
// the CPU) order the reads that follow it.
WARPSTORE_HD inline void fence_acquire_system() {
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_system);
}

// Makes this thread's writes (bytes for a controller in pinned memory) visible
// system-wide before anything it or its warp publishes next.
WARPSTORE_HD inline void fence_release_system() {
  cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_system);
}

// Monotonic nanoseconds, comparable within one target.
WARPSTORE_HD inline std::uint64_t now_ns() {
#if WARPSTORE_ON_GPU
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
#endif
}

// A fast-moving count for cheap randomness (miss admission): the
// multiprocessor's cycle counter on the GPU, now_ns() on the CPU.
WARPSTORE_HD inline std::uint64_t cycles() {
#if WARPSTORE_ON_GPU
  return static_cast<std::uint64_t>(clock64());
#else
  return now_ns();
#endif
}

// Back off inside a spin loop.
WARPSTORE_HD inline void backoff(unsigned ns) {
#if WARPSTORE_ON_GPU
  __nanosleep(ns);
#else
  (void)ns;
  std::this_thread::yield();
#endif
}

// A deadline for one bounded wait. Reading the clock is not free, so it is
// consulted only every few iterations.
class deadline {
 public:
  // The clock starts at the first check, so a wait that succeeds at once
  // never reads it.
  WARPSTORE_HD explicit deadline(std::uint64_t timeout_ns) : timeout_(timeout_ns) {}
  WARPSTORE_HD bool expired() { return expired(0); }
  // The same for a wait behind others (its turn comes when those ahead are
  // served): `progress` is a counter that moves whenever the work ahead
  // moves, and each move starts the timeout again, so the deadline means no
  // progress for that long, not a long queue. A wait whose work ahead keeps
  // moving still ends by `max_extension` timeouts: nothing waits forever.
  WARPSTORE_HD bool expired(std::uint64_t progress) {
    if ((++spins_ & 63u) != 1u) return false;
    const std::uint64_t now = now_ns();
    if (end_ == 0) {
      end_ = now + timeout_;
      last_end_ = now + timeout_ * max_extension;
      seen_ = progress;
      return false;
    }
    if (progress != seen_) {
      seen_ = progress;
      end_ = now + timeout_ < last_end_ ? now + timeout_ : last_end_;
    }
    // Started at last_end_ - max_extension timeouts.
    overdue_ = overdue_ || now + timeout_ * max_extension >= last_end_ + timeout_ / overdue_share;
    return now > end_;
  }
  // The same, for progress that costs something to read (a scan of a
  // cache set): `progress()` is called only when the clock is consulted.
  template <class Progress>
  WARPSTORE_HD bool expired_unless_moving(Progress&& progress) {
    if (((spins_ + 1) & 63u) != 1u) {
      ++spins_;
      return false;
    }
    return expired(progress());
  }
  // Once expired: whether the wait ran to its last extension, the work ahead
  // having moved within its last timeout. Such a wait was behind others all
  // along and never got its turn (starved), which is not the same as stuck.
  WARPSTORE_HD bool capped() const { return end_ != 0 && end_ == last_end_; }
  // Whether the wait had lasted 1/overdue_share of its timeout or more at
  // the last clock reading: long enough for priority over newcomers
  // (cache_ref::acquire's `urgent`).
  WARPSTORE_HD bool overdue() const { return overdue_; }
  WARPSTORE_HD void pause() {
    const unsigned ns = spins_ < 64 ? 32u : (spins_ < 4096 ? 256u : 2048u);
    backoff(ns);
  }
  static constexpr std::uint64_t max_extension = 16;
  static constexpr std::uint64_t overdue_share = 4;

 private:
  std::uint64_t timeout_;
  std::uint64_t end_ = 0;
  std::uint64_t last_end_ = 0;
  std::uint64_t seen_ = 0;
  std::uint32_t spins_ = 0;
  bool overdue_ = false;
};

// Which queue pair a caller uses by default: its SM on the GPU, a per-thread
// number on the CPU.
WARPSTORE_HD inline unsigned locality_id() {
#if WARPSTORE_ON_GPU
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
#else
  static std::atomic<unsigned> next{0};
  thread_local unsigned id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
#endif
}

// A caller's locality spread over the warps of its multiprocessor: on the
// GPU, warps of one SM land on different values (the same for every lane of
// a warp); on the CPU, locality ids are per thread already.
WARPSTORE_HD inline unsigned spread_locality(unsigned locality) {
#if WARPSTORE_ON_GPU
  unsigned warp_slot;
  asm volatile("mov.u32 %0, %%warpid;" : "=r"(warp_slot));
  return locality + 37u * warp_slot;
#else
  return locality;
#endif
}

// Warp primitives. All take the mask of the lanes that call together.
namespace warp {

#if WARPSTORE_ON_GPU
inline constexpr unsigned size = 32;
// The mask of a whole warp: every lane of it.
inline constexpr unsigned whole = 0xFFFFFFFFu;
__device__ inline unsigned active_mask() { return __activemask(); }
__device__ inline unsigned lane() {
  unsigned l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
__device__ inline unsigned match_any(unsigned mask, std::uint64_t key) {
  return __match_any_sync(mask, static_cast<unsigned long long>(key));
}
__device__ inline unsigned ballot(unsigned mask, bool pred) { return __ballot_sync(mask, pred); }
template <class T>
__device__ inline T shfl(unsigned mask, T v, unsigned src) {
  return __shfl_sync(mask, v, static_cast<int>(src));
}
__device__ inline void sync(unsigned mask) { __syncwarp(mask); }
#else
inline constexpr unsigned size = 1;
inline constexpr unsigned whole = 1u;  // the thread itself
inline unsigned active_mask() { return 1u; }
inline unsigned lane() { return 0u; }
inline unsigned match_any(unsigned, std::uint64_t) { return 1u; }
inline unsigned ballot(unsigned, bool pred) { return pred ? 1u : 0u; }
template <class T>
inline T shfl(unsigned, T v, unsigned) {
  return v;
}
inline void sync(unsigned) {}
#endif

// Lowest set lane of a mask, and the rank of `lane` within it.
WARPSTORE_HD inline unsigned first_lane(unsigned mask) {
#if WARPSTORE_ON_GPU
  return static_cast<unsigned>(__ffs(static_cast<int>(mask)) - 1);
#else
  return static_cast<unsigned>(__builtin_ctz(mask));
#endif
}
WARPSTORE_HD inline unsigned popcount(unsigned mask) {
#if WARPSTORE_ON_GPU
  return static_cast<unsigned>(__popc(mask));
#else
  return static_cast<unsigned>(__builtin_popcount(mask));
#endif
}
WARPSTORE_HD inline unsigned rank_in(unsigned mask, unsigned lane) {
  return popcount(mask & ((1u << lane) - 1u));
}

// The largest `x` of the lanes of `mask` (any subset of the warp), every
// lane of it gets it; on the CPU a lane's own.
WARPSTORE_HD inline unsigned max_of(unsigned mask, unsigned x) {
#if WARPSTORE_ON_GPU
  return __reduce_max_sync(mask, x);
#else
  (void)mask;
  return x;
#endif
}

// Sum of `x` over the lanes of `mask`, every lane gets it. On the GPU `mask`
// is the whole warp (a butterfly over 32 lanes); on the CPU a lane alone.
template <class T>
WARPSTORE_HD inline T sum(unsigned mask, T x) {
#if WARPSTORE_ON_GPU
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(mask, x, o);
#else
  (void)mask;
#endif
  return x;
}

}  // namespace warp

// Elements offset, offset + stride, ... below n of src to the same places
// of dst, by one lane of `stride` sharing the copy: four loads in flight
// before the first store (a row read across PCIe, one load at a time,
// would wait on each).
template <class T>
WARPSTORE_HD inline void copy_strided(const T* src, T* dst, std::uint64_t n, unsigned stride,
                                      unsigned offset) {
  constexpr unsigned batch = 4;
  for (std::uint64_t w = offset; w < n; w += batch * std::uint64_t{stride}) {
    T v[batch];
    WARPSTORE_UNROLL
    for (unsigned j = 0; j < batch; ++j)
      if (w + j * stride < n) v[j] = src[w + j * stride];
    WARPSTORE_UNROLL
    for (unsigned j = 0; j < batch; ++j)
      if (w + j * stride < n) dst[w + j * stride] = v[j];
  }
}

// Copy `bytes` (a multiple of 16, both pointers 16-byte aligned) from `src`
// to `dst`, lane `r` of the `n` sharing it taking every n-th 16 bytes from
// its r-th. `src` is read around the L1 cache because it may have been
// written by another agent (the CPU or the copy engine) since this SM last
// looked. On the CPU lane 0 copies it all.
WARPSTORE_HD inline void shared_copy(unsigned n, unsigned r, void* dst, const void* src,
                                     std::uint32_t bytes) {
#if WARPSTORE_ON_GPU
  auto* d = static_cast<uint4*>(dst);
  const auto* s = static_cast<const uint4*>(src);
  const std::uint32_t words = bytes / 16;
  std::uint32_t i = r;
  // Four loads in flight per lane before the first store.
  for (; i + 3 * n < words; i += 4 * n) {
    uint4 a = __ldcv(s + i), b = __ldcv(s + i + n), c = __ldcv(s + i + 2 * n),
          e = __ldcv(s + i + 3 * n);
    d[i] = a;
    d[i + n] = b;
    d[i + 2 * n] = c;
    d[i + 3 * n] = e;
  }
  for (; i < words; i += n) d[i] = __ldcv(s + i);
#else
  (void)n;
  if (r == 0) __builtin_memcpy(dst, src, bytes);
#endif
}

// shared_copy by every lane of `mask`.
WARPSTORE_HD inline void cooperative_copy(unsigned mask, void* dst, const void* src,
                                          std::uint32_t bytes) {
  shared_copy(warp::popcount(mask), warp::rank_in(mask, warp::lane()), dst, src, bytes);
}

}  // namespace warpstore::detail
