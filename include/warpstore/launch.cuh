// Running a body on every warp of a launch, on either target:
//
//   const std::uint64_t n = run_warps(warps, body);
//
// calls body(warp, n) for every warp in [0, n) and returns n once all have
// returned. The bodies share their work by striding over n (warp w takes
// items w, w + n, w + 2n, ...) and never wait for one another: the n warps
// are not promised to run at once (a GPU holds as many as fit, the CPU
// target's threads run as the OS schedules them). A body is a copyable
// object with a const WARPSTORE_HD operator()(std::uint64_t warp,
// std::uint64_t warps), passed to the GPU by value: a struct, since nvcc
// takes host lambdas into kernels only with --extended-lambda.
//
// run_warps<R>(...) holds each lane of the GPU kernel to R registers (24 to
// 255; the default, 0, leaves it to the compiler). A body that inlines the
// cache's read path takes up to 255 registers, so an SM holds 8 of its warps;
// a body that waits on a chain of lookups and reads for each item wants more
// warps in flight than that, and a cap buys them with some spills.
//
// GPU form (code compiled by nvcc): exactly `warps` warps (0: as many as
// stay resident on the whole GPU), each of 32 lanes, every lane calling body
// (so its mask is warp::whole); blocks of `block_threads` threads, a multiple
// of 32 (else invalid_argument), so a warp past n leaves whole. The device is
// synchronized before it returns: a refused launch or a kernel fault raises
// warpstore::runtime_error.
//
// CPU form: clamp(warps, 1, cpu_warps()) std::threads (0: cpu_warps()), each
// a warp of one lane; block_threads is checked as on the GPU, then unused. A
// body that throws, or a thread that cannot start, does not stop the others:
// every thread started is joined, then the first exception is rethrown.
//
// The compiler picks the form, not the library linked: host code of the GPU
// build that calls run_warps must be compiled by nvcc (a .cu file; a .cpp
// shared with the CPU target gets a one-line .cu that includes it), or it
// runs on threads. The forms live in different inline namespaces, so the
// linker never takes one form's instantiation for the other's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "warpstore/detail/platform.cuh"
#include "warpstore/error.h"

#if defined(__CUDACC__)
#include "warpstore/cuda_check.h"
#else
#include <exception>
#include <mutex>
#include <vector>
#endif

namespace warpstore {

// Threads of a CPU-target launch: the hardware's, at least 2 (warps still
// interleave on one core) and at most 8.
inline unsigned cpu_warps() { return std::clamp(std::thread::hardware_concurrency(), 2u, 8u); }

namespace detail {

inline void check_block_threads(unsigned block_threads) {
  if (block_threads == 0 || block_threads % 32 != 0)
    throw invalid_argument("run_warps: block_threads " + std::to_string(block_threads) +
                           " is not a positive multiple of 32 (whole warps only)");
}

}  // namespace detail

#if defined(__CUDACC__)

namespace detail {

// The calling thread's warp of the launch runs body, if it is one of `warps`.
template <class Body>
__device__ inline void run_own_warp(const Body& body, std::uint64_t warps) {
  const std::uint64_t warp = (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (warp < warps) body(warp, warps);
}

template <class Body>
__global__ void run_warps_kernel(const Body body, const std::uint64_t warps) {
  run_own_warp(body, warps);
}

// The same, each lane held to MaxRegisters registers (run_warps<MaxRegisters>).
template <class Body, unsigned MaxRegisters>
__global__ void __maxnreg__(MaxRegisters) run_warps_capped_kernel(const Body body,
                                                                   const std::uint64_t warps) {
  run_own_warp(body, warps);
}

template <class Body, unsigned MaxRegisters>
constexpr auto run_warps_kernel_for() {
  if constexpr (MaxRegisters == 0) {
    return &run_warps_kernel<Body>;
  } else {
    static_assert(MaxRegisters >= 24 && MaxRegisters <= 255,
                  "run_warps: a cap of 24 to 255 registers");
    return &run_warps_capped_kernel<Body, MaxRegisters>;
  }
}

}  // namespace detail

inline namespace gpu_form {

// Lanes of each warp run_warps runs (warp::size inside its bodies), for the
// host code that sizes a launch's work: 32 here, 1 on the CPU target.
inline constexpr unsigned lanes_per_warp = 32;

template <unsigned MaxRegisters = 0, class Body>
std::uint64_t run_warps(std::uint64_t warps, const Body& body, unsigned block_threads = 256) {
  detail::check_block_threads(block_threads);
  constexpr auto kernel = detail::run_warps_kernel_for<Body, MaxRegisters>();
  const std::uint64_t per_block = block_threads / 32;
  std::uint64_t n = warps;
  if (n == 0) {
    int per_sm = 0;
    WARPSTORE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, kernel, static_cast<int>(block_threads), 0));
    if (per_sm <= 0)
      throw runtime_error("run_warps: no block of " + std::to_string(block_threads) +
                          " threads of this body fits a multiprocessor");
    n = std::uint64_t{static_cast<unsigned>(per_sm)} * runtime::processor_count() * per_block;
  }
  const std::uint64_t blocks = n / per_block + (n % per_block != 0);
  if (blocks > 0x7FFFFFFFu)
    throw invalid_argument("run_warps: " + std::to_string(n) +
                           " warps are more than one grid holds");
  kernel<<<static_cast<unsigned>(blocks), block_threads>>>(body, n);
  WARPSTORE_CHECK_LAUNCH();
  WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
  return n;
}

}  // namespace gpu_form

#else

inline namespace cpu_form {

// Lanes of each warp run_warps runs (warp::size inside its bodies), for the
// host code that sizes a launch's work: 1 here, 32 on the GPU.
inline constexpr unsigned lanes_per_warp = 1;

template <unsigned MaxRegisters = 0, class Body>
std::uint64_t run_warps(std::uint64_t warps, const Body& body, unsigned block_threads = 256) {
  detail::check_block_threads(block_threads);
  const std::uint64_t most = cpu_warps();
  const std::uint64_t n = warps == 0 ? most : std::min(warps, most);
  std::mutex m;
  std::exception_ptr first;
  const auto keep = [&m, &first](std::exception_ptr e) {
    const std::lock_guard<std::mutex> lock(m);
    if (!first) first = std::move(e);
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::uint64_t w = 0; w < n; ++w) {
    try {
      threads.emplace_back([&body, &keep, w, n] {
        try {
          body(w, n);
        } catch (...) {
          keep(std::current_exception());
        }
      });
    } catch (...) {
      keep(std::current_exception());  // this warp never runs; the others do
    }
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  return n;
}

}  // namespace cpu_form

#endif

}  // namespace warpstore
