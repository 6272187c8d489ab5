// Asynchronous batches from kernels, in a kernel where compute and I/O are
// comparable: a tiled out-of-core matrix product C = A * B. A (M x K
// float32) is a file, read through warpstore; B (K x N) and C sit in GPU
// memory. The ways to feed the same tile product, measured in one run:
//
//   sync   a persistent grid; per tile, two warps pin its rows (array_ref::pin,
//          one row per lane: their misses fill together), the block computes,
//          unpins.
//   async  the same grid, double-buffered: the batch of tile k+1 is posted
//          (array_ref::prefetch, pinned) before tile k is computed, and
//          waited for after.
//   sync+lw, async+lw (--layers only)  the same two with a ninth warp that
//          computes nothing and gets the next tile ready while the others
//          compute (loader_warp_kernel).
//   cpu    CPU-orchestrated double buffering: host threads pread chunks of
//          rows into two pinned buffers, cudaMemcpyAsync on two streams, and
//          a plain kernel over each chunk with the same tile product.
//
// With --layers L the product is a chain, the weights of a deep network
// streamed from storage (offloaded inference): A holds L square K x K
// layers, Y_l = alpha * A_l * Y_{l-1}, Y_0 (K x N) in GPU memory. Layer l+1
// needs all of Y_l, so the grid meets at a barrier after each layer (a
// cooperative launch) and the sync kernel cannot hide one block's I/O
// behind another's compute across it; the async kernel posts its first tile
// of layer l+1 before the barrier of layer l. The cpu variant reads layer
// l+1 while the GPU computes layer l.
//
// Without --layers the tiles are independent (one C = A * B): the sync
// kernel's 132 blocks already overlap one block's wait with the others'
// compute, which bounds what async can add there (BENCHMARKS.md).
//
// A row of A is one cache line (line size = K * 4). The output is checked
// against a CPU reference on sampled rows for every variant (each layer's
// rows from the GPU's own previous layer). Rows written (--json):
// async.kernel.vs_sync (value: async, ceiling: sync; ratio > 1: async
// faster), async.kernel.vs_cpu_double_buffer, and each variant alone.
#include <fcntl.h>
#include <unistd.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/args.h"
#include "support/gpu.cuh"
#include "support/results.h"
#include "support/setting_options.h"
#include "support/timing.h"
#include "warpstore/array.cuh"
#include "warpstore/cuda_check.h"
#include "warpstore/detail/hash.cuh"

using namespace warpstore;
using namespace warpstore::bench;

namespace {

constexpr int tile_rows = 64;       // rows of A per tile
constexpr int block_threads = 256;  // one column of C per thread per pass
constexpr int k_step = 32;          // columns of A staged in shared memory at a time
constexpr int loader_warps = tile_rows / 32;

// Deterministic values in [-0.5, 0.5), the same on host and device.
// (An A file written with another function fails a_file_ok's probes and is
// written again.)
__host__ __device__ inline float value_of(std::uint64_t i, std::uint64_t seed) {
  const std::uint64_t x = detail::mix64(i * detail::golden_gamma + seed);
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f) - 0.5f;
}
constexpr std::uint64_t a_seed = 1, b_seed = 2;

struct shape {
  std::uint64_t m, k, n;
};

// The barrier of the block_threads threads that compute (warps 0 to 7): a
// block's whole self, or all of it but the loader warp of the kernels that
// have one (loader_warp_kernel).
__device__ inline void compute_sync() { asm volatile("bar.sync 1, %0;" ::"n"(block_threads) : "memory"); }

// C[row0 .. row0 + tile_rows) = A rows (rows[r]: K floats, nullptr: zero) * B.
// Threads 0 .. block_threads - 1 of the block call.
__device__ void tile_product(const float* const* rows, const float* __restrict__ b, int k, int n,
                             float* __restrict__ c_rows, float* a_stage, float alpha = 1.f) {
  for (int col0 = 0; col0 < n; col0 += block_threads) {
    const int col = col0 + static_cast<int>(threadIdx.x);
    float acc[tile_rows];
#pragma unroll
    for (int r = 0; r < tile_rows; ++r) acc[r] = 0.f;
    for (int k0 = 0; k0 < k; k0 += k_step) {
      compute_sync();
      for (int e = threadIdx.x; e < tile_rows * k_step / 4; e += block_threads) {
        const int r = e / (k_step / 4), q = e % (k_step / 4);
        const float4 v = rows[r] ? reinterpret_cast<const float4*>(rows[r] + k0)[q]
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
        reinterpret_cast<float4*>(a_stage)[e] = v;
      }
      compute_sync();
#pragma unroll 2
      for (int kk = 0; kk < k_step; kk += 4) {
        const float b0 = b[std::size_t(k0 + kk) * n + col];
        const float b1 = b[std::size_t(k0 + kk + 1) * n + col];
        const float b2 = b[std::size_t(k0 + kk + 2) * n + col];
        const float b3 = b[std::size_t(k0 + kk + 3) * n + col];
#pragma unroll
        for (int r = 0; r < tile_rows; ++r) {
          const float4 a = reinterpret_cast<const float4*>(a_stage + r * k_step + kk)[0];
          acc[r] = fmaf(a.x, b0, fmaf(a.y, b1, fmaf(a.z, b2, fmaf(a.w, b3, acc[r]))));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < tile_rows; ++r) c_rows[std::size_t(r) * n + col] = alpha * acc[r];
  }
}

// Where a block's time goes, summed over the grid by thread 0 of each
// block (in the loader warp): waiting for a tile's rows (the pins, or the
// wait on the posted batch, to the barrier after), computing it, posting the
// next batch, releasing the pins, and (layers) waiting at the grid barrier.
enum phase : int { phase_wait, phase_compute, phase_post, phase_release, phase_barrier, phases };

struct kernel_args {
  const float* b;
  float* c;
  shape s;
  std::uint64_t tiles;
  unsigned long long* failed;  // tiles whose rows could not be read
  unsigned long long* phase_ns;  // [phases], summed over blocks
  float alpha = 1.f;             // C = alpha * A * B
};

// Thread 0's clock for the phases of its block.
struct phase_clock {
  std::uint64_t sum[phases] = {};
  std::uint64_t last = 0;
  __device__ void start() { last = threadIdx.x == 0 ? detail::now_ns() : 0; }
  __device__ void lap(phase p) {
    if (threadIdx.x != 0) return;
    const std::uint64_t t = detail::now_ns();
    sum[p] += t - last;
    last = t;
  }
  __device__ void add_to(unsigned long long* out) const {
    if (threadIdx.x != 0) return;
    for (int p = 0; p < phases; ++p) atomicAdd(out + p, static_cast<unsigned long long>(sum[p]));
  }
};

// One tile of the sync kernels: the loader warps pin its rows (`first` +
// r * row_elems, one a lane), the block computes (compute()), they unpin.
template <class Compute>
__device__ void sync_tile(const array_ref<float>& a, std::uint64_t first, std::uint64_t row_elems,
                          const float** rows, unsigned long long* failed, phase_clock& clock,
                          Compute&& compute) {
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  pinned_line<float> line;
  if (warp < loader_warps) {
    line = a.pin(first + (warp * 32 + lane) * row_elems);
    rows[warp * 32 + lane] = line.valid() ? line.data : nullptr;
    if (!line.valid()) atomicAdd(failed, 1ull);
  }
  __syncthreads();
  clock.lap(phase_wait);
  compute();
  __syncthreads();
  clock.lap(phase_compute);
  if (warp < loader_warps) line.release();
  clock.lap(phase_release);
}

// sync: per tile, the loader warps pin its rows (one per lane), then compute.
__global__ void __launch_bounds__(block_threads, 1) sync_kernel(array_ref<float> a, kernel_args p) {
  __shared__ const float* rows[tile_rows];
  __shared__ __align__(16) float stage[tile_rows * k_step];
  phase_clock clock;
  clock.start();
  for (std::uint64_t t = blockIdx.x; t < p.tiles; t += gridDim.x)
    sync_tile(a, t * tile_rows * p.s.k, p.s.k, rows, p.failed, clock, [&] {
      tile_product(rows, p.b, int(p.s.k), int(p.s.n), p.c + t * tile_rows * p.s.n, stage);
    });
  clock.add_to(p.phase_ns);
}

// One tile of the async kernels by the computing warps: warp 0 waits for
// the tile's batch (`cur`, its rows `first` + r * row_elems), points `rows`
// at its lines and posts the next tile's (`next_first`, if `has_next`) into
// `ahead`; the block computes (compute()); warp 0 releases `cur` and keeps
// `ahead` in it.
template <class Compute>
__device__ void same_warps_tile(const array_ref<float>& a, batch_ticket& cur, std::uint64_t first,
                                std::uint64_t row_elems, bool has_next, std::uint64_t next_first,
                                const float** rows, unsigned long long* failed,
                                phase_clock& clock, Compute&& compute) {
  const bool loader = threadIdx.x < 32;
  batch_ticket ahead;
  if (loader) {
    const bool ok = a.wait(cur);
    clock.lap(phase_wait);
    for (unsigned r = threadIdx.x; r < tile_rows; r += 32)
      rows[r] = ok ? a.pinned_element(first + r * row_elems) : nullptr;
    if (!ok && threadIdx.x == 0) atomicAdd(failed, 1ull);
    // prefetch is collective over calling_mask() (__activemask()): the
    // lanes diverged in pinned_element (a per-lane tag scan) reconverge
    // first, so the whole warp posts one batch.
    __syncwarp();
    if (has_next) ahead = a.prefetch(next_first, tile_rows * row_elems, true);
    clock.lap(phase_post);
  }
  __syncthreads();
  clock.lap(phase_wait);
  compute();
  __syncthreads();
  clock.lap(phase_compute);
  if (loader) {
    a.release(cur);
    cur = ahead;
  }
  clock.lap(phase_release);
}

// async: one loader warp posts the batch of the block's next tile (all its
// rows) before the block computes this one, and waits for it after. One
// warp, not one per 32 rows: a posted batch holds its queue slots until its
// warp waits, and warps coupled by __syncthreads must together hold one
// batch at a time (array_ref::prefetch). Two loader warps each holding
// their window across the barrier deadlocked: tickets of the pair wrapped
// onto the parked warp's slots, the claimer blocked holding an unposted
// ticket, the tail stopped there, and the block-mate's commands behind it
// never completed (CPU test DoubleBufferedTiles*).
__global__ void __launch_bounds__(block_threads, 1) async_kernel(array_ref<float> a, kernel_args p) {
  __shared__ const float* rows[tile_rows];
  __shared__ __align__(16) float stage[tile_rows * k_step];
  phase_clock clock;
  clock.start();
  batch_ticket cur;
  if (threadIdx.x < 32 && blockIdx.x < p.tiles)
    cur = a.prefetch(blockIdx.x * tile_rows * p.s.k, tile_rows * p.s.k, true);
  clock.lap(phase_post);
  for (std::uint64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const std::uint64_t next = t + gridDim.x;
    same_warps_tile(a, cur, t * tile_rows * p.s.k, p.s.k, next < p.tiles,
                    next * tile_rows * p.s.k, rows, p.failed, clock, [&] {
                      tile_product(rows, p.b, int(p.s.k), int(p.s.n),
                                   p.c + t * tile_rows * p.s.n, stage);
                    });
  }
  clock.add_to(p.phase_ns);
}

// The chain (--layers): the arguments of both kernels. Layer l's rows of A
// are file rows [l * k, (l + 1) * k); Y_l is y + l * k * n (row-major k x n).
struct layer_args {
  float* y;
  std::uint64_t k, n;
  std::uint32_t layers;
  std::uint64_t tiles_per_layer;
  float alpha;
  unsigned long long* failed;
  unsigned long long* phase_ns;
  // A diagnostic (--loader-after-compute): the loader warp gets item i + 1
  // ready after the block computed item i, not while it computes, so the
  // compute phase runs beside an idle loader in the same kernel (same code,
  // same registers). Slower, and never a figure.
  bool loader_after = false;
  // First element of tile t of layer l.
  __device__ std::uint64_t first_element(std::uint32_t l, std::uint64_t t) const {
    return (std::uint64_t{l} * k + t * tile_rows) * k;
  }
  __device__ const float* in(std::uint32_t l) const { return y + std::uint64_t{l} * k * n; }
  __device__ float* out(std::uint32_t l, std::uint64_t t) const {
    return y + (std::uint64_t{l} + 1) * k * n + t * tile_rows * n;
  }
};

// The chain by the computing warps. Sync: per tile, the loader warps pin
// its rows, the block computes (sync_tile). Async: the block's tiles in
// order, layer after layer; warp 0 posts the next one (of this layer or the
// next: the rows of A do not depend on Y) before the block computes this
// one (same_warps_tile), so the reads of layer l + 1 run while the grid
// finishes layer l and meets. The grid meets after each layer.
template <bool Async>
__global__ void __launch_bounds__(block_threads, 1) layers_kernel(array_ref<float> a,
                                                                  layer_args p) {
  __shared__ const float* rows[tile_rows];
  __shared__ __align__(16) float stage[tile_rows * k_step];
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  phase_clock clock;
  clock.start();
  [[maybe_unused]] batch_ticket cur;
  if constexpr (Async) {
    if (threadIdx.x < 32 && blockIdx.x < p.tiles_per_layer)
      cur = a.prefetch(p.first_element(0, blockIdx.x), tile_rows * p.k, true);
    clock.lap(phase_post);
  }
  for (std::uint32_t l = 0; l < p.layers; ++l) {
    for (std::uint64_t t = blockIdx.x; t < p.tiles_per_layer; t += gridDim.x) {
      auto compute = [&] {
        tile_product(rows, p.in(l), int(p.k), int(p.n), p.out(l, t), stage, p.alpha);
      };
      if constexpr (Async) {
        std::uint32_t next_l = l;
        std::uint64_t next_t = t + gridDim.x;
        if (next_t >= p.tiles_per_layer) {
          next_l = l + 1;
          next_t = blockIdx.x;
        }
        same_warps_tile(a, cur, p.first_element(l, t), p.k, next_l < p.layers,
                        next_l < p.layers ? p.first_element(next_l, next_t) : 0, rows, p.failed,
                        clock, compute);
      } else {
        sync_tile(a, p.first_element(l, t), p.k, rows, p.failed, clock, compute);
      }
    }
    grid.sync();  // Y_l is whole
    clock.lap(phase_barrier);
  }
  clock.add_to(p.phase_ns);
}

// The chain with a loader warp (warp specialization): warps 0 to 7 compute
// item i (the block's tiles in order, layer after layer) while warp 8, which
// computes nothing, gets item i + 1 ready, so the move of its rows into GPU
// memory (the GPU pull, at the wait) overlaps the compute instead of
// following it. Async: the loader waits for item i + 1, posted one item
// earlier, then posts item i + 2 (a batch always in flight behind the one it
// collects). Sync: the loader pins item i + 1's rows (array_ref::pin, one
// row a lane at a time): the strongest synchronous kernel, the overlap
// without the batches. Tickets and pins live in shared memory, not in the
// registers the product needs.
constexpr int loader_block_threads = block_threads + 32;

// Shared memory for N objects of a type with member initializers (which a
// __shared__ variable cannot have): written before they are read.
template <class T, std::size_t N>
struct shared_slots {
  alignas(T) unsigned char bytes[N * sizeof(T)];
  __device__ T& operator[](std::size_t i) { return reinterpret_cast<T*>(bytes)[i]; }
};

// One block a multiprocessor: 9 warps, so three share one of its four
// register files (168 registers a thread).
template <bool Async>
__global__ void __launch_bounds__(loader_block_threads, 1)
    loader_warp_kernel(array_ref<float> a, layer_args p) {
  __shared__ const float* rows[2][tile_rows];
  __shared__ __align__(16) float stage[tile_rows * k_step];
  __shared__ shared_slots<batch_ticket, 3 * 32> tickets;       // Async: items i .. i + 2, [i % 3][lane]
  __shared__ shared_slots<pinned_line<float>, 2 * tile_rows> pins;  // sync: items i, i + 1, [i % 2][row]
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const unsigned lane = threadIdx.x % 32;
  const bool loader = threadIdx.x >= block_threads;
  const std::uint64_t span = tile_rows * p.k;
  // The block's items: i -> (layer, tile); count per layer and in all.
  const std::uint64_t per_layer =
      blockIdx.x < p.tiles_per_layer ? (p.tiles_per_layer - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const std::uint64_t items = per_layer * p.layers;
  auto layer_of = [&](std::uint64_t i) { return static_cast<std::uint32_t>(i / per_layer); };
  auto tile_of = [&](std::uint64_t i) { return blockIdx.x + (i % per_layer) * gridDim.x; };
  auto first_of = [&](std::uint64_t i) { return p.first_element(layer_of(i), tile_of(i)); };
  phase_clock clock;  // thread 0: a computing thread
  clock.start();
  // The loader makes item j ready: its rows in rows[j % 2], pinned.
  auto ready = [&](std::uint64_t j) {
    if constexpr (Async) {
      batch_ticket t = tickets[j % 3 * 32 + lane];
      const bool ok = a.wait(t);
      tickets[j % 3 * 32 + lane] = t;
      for (unsigned r = lane; r < tile_rows; r += 32)
        rows[j % 2][r] = ok ? a.pinned_element(first_of(j) + r * p.k) : nullptr;
      if (!ok && lane == 0) atomicAdd(p.failed, 1ull);
      __syncwarp();  // prefetch is collective over the whole warp
      if (j + 1 < items) tickets[(j + 1) % 3 * 32 + lane] = a.prefetch(first_of(j + 1), span, true);
    } else {
      for (unsigned r = lane; r < tile_rows; r += 32) {
        pinned_line<float> line = a.pin(first_of(j) + r * p.k);
        rows[j % 2][r] = line.valid() ? line.data : nullptr;
        if (!line.valid()) atomicAdd(p.failed, 1ull);
        pins[j % 2 * tile_rows + r] = line;
      }
    }
  };
  auto give_back = [&](std::uint64_t j) {
    if constexpr (Async) {
      batch_ticket t = tickets[j % 3 * 32 + lane];
      a.release(t);
    } else {
      for (unsigned r = lane; r < tile_rows; r += 32) pins[j % 2 * tile_rows + r].release();
    }
  };
  if (loader && items > 0) {
    if constexpr (Async) tickets[lane] = a.prefetch(first_of(0), span, true);
    ready(0);
  }
  __syncthreads();
  clock.lap(phase_wait);
  // One step an item: the loader readies item i + 1 while the others compute
  // item i. Two with loader_after (the same for every thread of the grid):
  // compute, then ready. One call site each, so the diagnostic's kernel has
  // the figure's code.
  const int steps = p.loader_after ? 2 : 1;
  for (std::uint64_t i = 0; i < items; ++i) {
    for (int step = 0; step < steps; ++step) {
      if (loader) {
        if (step == steps - 1 && i + 1 < items) ready(i + 1);
      } else if (step == 0) {
        tile_product(rows[i % 2], p.in(layer_of(i)), int(p.k), int(p.n),
                     p.out(layer_of(i), tile_of(i)), stage, p.alpha);
        clock.lap(phase_compute);
      }
      __syncthreads();  // item i computed, item i + 1 ready (the last step)
      clock.lap(phase_wait);  // computing threads: waiting for the loader
    }
    if (loader) give_back(i);
    if ((i + 1) % per_layer == 0) {
      grid.sync();  // Y of this layer is whole
      clock.lap(phase_barrier);
    }
  }
  // Blocks without tiles still meet the others at every layer.
  if (items == 0)
    for (std::uint32_t l = 0; l < p.layers; ++l) grid.sync();
  clock.add_to(p.phase_ns);
}

// cpu double buffering: one block per tile of a chunk in GPU memory.
__global__ void __launch_bounds__(block_threads) chunk_kernel(const float* chunk,
                                                             std::uint64_t chunk_tiles,
                                                             std::uint64_t first_tile,
                                                             kernel_args p) {
  __shared__ const float* rows[tile_rows];
  __shared__ __align__(16) float stage[tile_rows * k_step];
  for (std::uint64_t t = blockIdx.x; t < chunk_tiles; t += gridDim.x) {
    if (threadIdx.x < tile_rows) rows[threadIdx.x] = chunk + (t * tile_rows + threadIdx.x) * p.s.k;
    __syncthreads();
    tile_product(rows, p.b, int(p.s.k), int(p.s.n), p.c + (first_tile + t) * tile_rows * p.s.n,
                 stage, p.alpha);
    __syncthreads();
  }
}

__global__ void fill_b(float* b, std::uint64_t count) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    b[i] = value_of(i, b_seed);
}

// The A file: value_of(i, a_seed) for element i, written by `threads` threads.
void make_a_file(const std::string& path, std::uint64_t elems, unsigned threads) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  constexpr std::uint64_t chunk = 1 << 20;  // elements
  const std::uint64_t chunks = (elems + chunk - 1) / chunk;
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> bad{false};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      std::vector<float> buf(chunk);
      for (std::uint64_t c; (c = next.fetch_add(1)) < chunks;) {
        const std::uint64_t first = c * chunk, n = std::min(chunk, elems - first);
        for (std::uint64_t i = 0; i < n; ++i) buf[i] = value_of(first + i, a_seed);
        if (::pwrite(fd, buf.data(), n * 4, static_cast<off_t>(first * 4)) !=
            static_cast<ssize_t>(n * 4))
          bad = true;
      }
    });
  for (auto& t : pool) t.join();
  ::close(fd);
  if (bad) throw std::runtime_error("cannot write " + path);
}

bool a_file_ok(const std::string& path, std::uint64_t elems) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  float probe[4];
  bool ok = size == static_cast<off_t>(elems * 4);
  for (std::uint64_t at : {std::uint64_t{0}, elems / 2, elems - 4})
    ok = ok && ::pread(fd, probe, 16, static_cast<off_t>(at * 4)) == 16 &&
         probe[3] == value_of(at + 3, a_seed);
  ::close(fd);
  return ok;
}

// Sampled rows of C against a CPU reference (double accumulation): wrong
// values, and the rows checked.
std::uint64_t check_c(const float* c_dev, const shape& s, const std::vector<float>& b,
                      int sample_rows, std::uint64_t& checked) {
  std::vector<std::uint64_t> rows = {0, s.m - 1};
  for (int i = 0; i < sample_rows; ++i) rows.push_back((i * 0x9E3779B97F4A7C15ull >> 17) % s.m);
  std::vector<float> got(s.n);
  std::vector<double> want(s.n), mag(s.n);
  std::uint64_t wrong = 0;
  for (std::uint64_t r : rows) {
    WARPSTORE_CUDA_TRY(
        cudaMemcpy(got.data(), c_dev + r * s.n, s.n * 4, cudaMemcpyDeviceToHost));
    std::fill(want.begin(), want.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (std::uint64_t kk = 0; kk < s.k; ++kk) {
      const double av = value_of(r * s.k + kk, a_seed);
      const float* brow = b.data() + kk * s.n;
      for (std::uint64_t j = 0; j < s.n; ++j) {
        want[j] += av * brow[j];
        mag[j] += std::fabs(av * brow[j]);
      }
    }
    for (std::uint64_t j = 0; j < s.n; ++j)
      wrong += !(std::fabs(got[j] - want[j]) <= 1e-5 * mag[j] + 1e-6);  // NaN: unwritten
  }
  checked = rows.size();
  return wrong;
}

struct variant_result {
  double seconds = 0;
  std::uint64_t mismatches = 0;
  std::uint64_t failed = 0;
};

// Runs a variant `trials` times and reports its median, printing each trial
// with where the blocks' time went (the phases, per tile).
struct trial_runner {
  int trials;
  std::uint64_t tiles;  // tiles of one run, for the per-tile phases
  double a_bytes;
  unsigned long long* failed_dev;
  unsigned long long* phase_dev;

  // reset(): before each trial (the output made NaN); once(): one run;
  // check(checked&): wrong values found in the output, rows checked.
  template <class Reset, class Once, class Check>
  variant_result measure(const char* name, Reset&& reset, Once&& once, Check&& check) const {
    std::vector<double> secs;
    variant_result best;
    for (int t = 0; t < trials; ++t) {
      reset();
      WARPSTORE_CUDA_TRY(cudaMemset(failed_dev, 0, sizeof(unsigned long long)));
      WARPSTORE_CUDA_TRY(cudaMemset(phase_dev, 0, phases * sizeof(unsigned long long)));
      variant_result r = once();
      unsigned long long phase_sum[phases] = {};
      WARPSTORE_CUDA_TRY(
          cudaMemcpy(phase_sum, phase_dev, sizeof phase_sum, cudaMemcpyDeviceToHost));
      unsigned long long failed = 0;
      WARPSTORE_CUDA_TRY(cudaMemcpy(&failed, failed_dev, sizeof failed, cudaMemcpyDeviceToHost));
      r.failed += failed;
      std::uint64_t checked = 0;
      r.mismatches = check(checked);
      std::fprintf(stderr,
                   "  %-6s trial %d: %.3f s (%.2f GB/s of A), %llu wrong of %llu rows checked, "
                   "%llu failed\n",
                   name, t, r.seconds, a_bytes / r.seconds / 1e9,
                   static_cast<unsigned long long>(r.mismatches),
                   static_cast<unsigned long long>(checked),
                   static_cast<unsigned long long>(r.failed));
      if (phase_sum[phase_compute] != 0)
        std::fprintf(stderr,
                     "         per tile (block thread 0): wait %.1f us, compute %.1f us, post "
                     "%.1f us, release %.1f us, grid barrier %.1f us\n",
                     phase_sum[phase_wait] / 1e3 / tiles, phase_sum[phase_compute] / 1e3 / tiles,
                     phase_sum[phase_post] / 1e3 / tiles, phase_sum[phase_release] / 1e3 / tiles,
                     phase_sum[phase_barrier] / 1e3 / tiles);
      secs.push_back(r.seconds);
      best.mismatches += r.mismatches;
      best.failed += r.failed;
    }
    best.seconds = secs[median_index(secs)];
    return best;
  }
};

// Bytes [offset, offset + bytes) of fd into host, split across `threads`
// threads (preads of up to 8 MiB); failed or short reads counted.
void read_range(int fd, void* host, std::uint64_t offset, std::uint64_t bytes, unsigned threads,
                std::atomic<std::uint64_t>& short_reads) {
  std::vector<std::thread> pool;
  const std::uint64_t per = (bytes / threads + 4095) / 4096 * 4096;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const std::uint64_t from = std::min(bytes, t * per), to = std::min(bytes, from + per);
      for (std::uint64_t at = from; at < to;) {
        const ssize_t r = ::pread(fd, static_cast<char*>(host) + at,
                                  std::min<std::uint64_t>(to - at, 8 << 20),
                                  static_cast<off_t>(offset + at));
        if (r <= 0) {
          short_reads.fetch_add(1);
          return;
        }
        at += static_cast<std::uint64_t>(r);
      }
    });
  for (auto& t : pool) t.join();
}

// What CPU double buffering works with: two pinned host buffers, two
// device buffers, two streams and an event on each, and the file. finish()
// waits for both streams, frees them (every call checked) and returns the
// run's time and failed reads.
struct double_buffers {
  float* host[2] = {};
  float* dev[2] = {};
  cudaStream_t stream[2] = {};
  cudaEvent_t done[2] = {};
  int fd = -1;
  std::atomic<std::uint64_t> short_reads{0};
  stopwatch clock;

  double_buffers(const std::string& path, std::uint64_t bytes) {
    for (int i = 0; i < 2; ++i) {
      WARPSTORE_CUDA_TRY(cudaMallocHost(&host[i], bytes));
      WARPSTORE_CUDA_TRY(cudaMalloc(&dev[i], bytes));
      WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&stream[i], cudaStreamNonBlocking));
      WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }
    fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error("cannot open " + path);
    clock.restart();
  }
  // Bytes [offset, offset + bytes) of the file into buffer i, once the
  // stream's earlier work with it is done, then to the GPU on its stream.
  void load(int i, std::uint64_t offset, std::uint64_t bytes, unsigned threads) {
    WARPSTORE_CUDA_TRY(cudaStreamSynchronize(stream[i]));  // buffer i is free again
    read_range(fd, host[i], offset, bytes, threads, short_reads);
    WARPSTORE_CUDA_TRY(
        cudaMemcpyAsync(dev[i], host[i], bytes, cudaMemcpyHostToDevice, stream[i]));
  }
  variant_result finish() {
    for (int i = 0; i < 2; ++i) WARPSTORE_CUDA_TRY(cudaStreamSynchronize(stream[i]));
    variant_result r;
    r.seconds = clock.seconds();
    r.failed = short_reads.load();
    ::close(fd);
    for (int i = 0; i < 2; ++i) {
      WARPSTORE_CUDA_TRY(cudaFreeHost(host[i]));
      WARPSTORE_CUDA_TRY(cudaFree(dev[i]));
      WARPSTORE_CUDA_TRY(cudaStreamDestroy(stream[i]));
      WARPSTORE_CUDA_TRY(cudaEventDestroy(done[i]));
    }
    return r;
  }
};

// CPU-orchestrated double buffering: chunks of `chunk_tiles` tiles.
variant_result run_cpu(const std::string& path, const shape& s, const kernel_args& base,
                       std::uint64_t chunk_tiles, unsigned threads, unsigned grid) {
  double_buffers db(path, chunk_tiles * tile_rows * s.k * 4);
  const std::uint64_t tiles = base.tiles;
  for (std::uint64_t first = 0, c = 0; first < tiles; first += chunk_tiles, ++c) {
    const int i = static_cast<int>(c & 1);
    const std::uint64_t n_tiles = std::min(chunk_tiles, tiles - first);
    db.load(i, first * tile_rows * s.k * 4, n_tiles * tile_rows * s.k * 4, threads);
    chunk_kernel<<<std::min<unsigned>(grid, static_cast<unsigned>(n_tiles)), block_threads, 0,
                   db.stream[i]>>>(db.dev[i], n_tiles, first, base);
    check_launched("chunk_kernel");
  }
  return db.finish();
}

// The chain's output, Y_1 .. Y_layers, on sampled rows of each layer against
// a CPU reference computed from the GPU's own previous layer (double
// accumulation): wrong values, and the rows checked. `same_a`: every layer
// used layer 0's rows of A (compute alone); only Y_1 is checked then.
std::uint64_t check_layers(const float* y_dev, std::uint64_t k, std::uint64_t n,
                           std::uint32_t layers, float alpha, int sample_rows, bool same_a,
                           std::uint64_t& checked) {
  const std::uint32_t check = same_a ? 1 : layers;
  std::vector<float> y((std::uint64_t{check} + 1) * k * n);
  WARPSTORE_CUDA_TRY(cudaMemcpy(y.data(), y_dev, y.size() * 4, cudaMemcpyDeviceToHost));
  const int per_layer = std::max(2, sample_rows / static_cast<int>(check));
  std::vector<double> want(n), mag(n);
  std::uint64_t wrong = 0;
  checked = 0;
  for (std::uint32_t l = 0; l < check; ++l) {
    const float* in = y.data() + std::uint64_t{l} * k * n;
    const float* got_layer = y.data() + (std::uint64_t{l} + 1) * k * n;
    for (int i = 0; i < per_layer; ++i) {
      const std::uint64_t r =
          i == 0 ? 0 : i == 1 ? k - 1 : ((i + l * per_layer) * 0x9E3779B97F4A7C15ull >> 17) % k;
      std::fill(want.begin(), want.end(), 0.0);
      std::fill(mag.begin(), mag.end(), 0.0);
      for (std::uint64_t kk = 0; kk < k; ++kk) {
        const double av = value_of((std::uint64_t{l} * k + r) * k + kk, a_seed);
        const float* yrow = in + kk * n;
        for (std::uint64_t j = 0; j < n; ++j) {
          want[j] += av * yrow[j];
          mag[j] += std::fabs(av * yrow[j]);
        }
      }
      const float* got = got_layer + r * n;
      for (std::uint64_t j = 0; j < n; ++j)  // NaN: unwritten
        wrong += !(std::fabs(got[j] - alpha * want[j]) <= 1e-4 * alpha * mag[j] + 1e-6);
      ++checked;
    }
  }
  return wrong;
}

// CPU-orchestrated double buffering over the chain: host threads read layer
// l + 1 into one pinned buffer while the GPU computes layer l from the
// other; a plain kernel per layer, layers in order.
variant_result run_cpu_layers(const std::string& path, std::uint64_t k, std::uint64_t n,
                              std::uint32_t layers, float* y_dev, float alpha, unsigned threads,
                              unsigned grid, unsigned long long* failed_dev) {
  const std::uint64_t layer_bytes = k * k * 4, tiles = k / tile_rows;
  double_buffers db(path, layer_bytes);
  for (std::uint32_t l = 0; l < layers; ++l) {
    const int i = static_cast<int>(l & 1);
    db.load(i, std::uint64_t{l} * layer_bytes, layer_bytes, threads);  // layer l - 2 is done
    if (l > 0) WARPSTORE_CUDA_TRY(cudaStreamWaitEvent(db.stream[i], db.done[1 - i], 0));  // Y_l
    const kernel_args args{y_dev + std::uint64_t{l} * k * n,
                           y_dev + (std::uint64_t{l} + 1) * k * n,
                           shape{k, k, n},
                           tiles,
                           failed_dev,
                           nullptr,
                           alpha};
    chunk_kernel<<<std::min<unsigned>(grid, static_cast<unsigned>(tiles)), block_threads, 0,
                   db.stream[i]>>>(db.dev[i], tiles, 0, args);
    check_launched("chunk_kernel");
    WARPSTORE_CUDA_TRY(cudaEventRecord(db.done[i], db.stream[i]));
  }
  return db.finish();
}

int run(const parsed_args& args) {
  const std::string path = args.str("file");
  shape s{0, args.count("k"), args.count("n")};
  const std::uint64_t a_bytes_wanted = args.size("a-bytes");
  if (s.k % k_step != 0 || s.k * 4 < 512 || s.k * 4 > 65536 || ((s.k * 4) & (s.k * 4 - 1)) != 0)
    throw usage_error("--k must make a row a power-of-two line of 512 B to 64 KiB (128 to 16384)");
  if (s.n == 0 || s.n % block_threads != 0)
    throw usage_error("--n must be a positive multiple of " + std::to_string(block_threads));
  // --layers: L square layers, the chain; otherwise one A of --a-bytes.
  const auto layers = static_cast<std::uint32_t>(args.count("layers"));
  s.m = layers > 0 ? s.k : a_bytes_wanted / (s.k * 4) / tile_rows * tile_rows;
  if (s.m == 0) throw usage_error("--a-bytes too small for one tile");
  const bool loader_after = args.flag("loader-after-compute");
  if (loader_after && (layers == 0 || !args.flag("no-cpu")))
    throw usage_error("--loader-after-compute is a diagnostic of the chain: give --layers and "
                      "--no-cpu");
  const std::uint64_t elems = s.m * s.k * std::max(1u, layers);
  const float alpha = layers > 0 ? std::sqrt(12.f / static_cast<float>(s.k)) : 1.f;
  // The environment, then --cache-bytes and --service-threads (the settings table).
  options o = apply_options(args);
  const unsigned threads = o.service_threads;
  if (!a_file_ok(path, elems)) {
    std::fprintf(stderr, "writing %s (%.2f GiB)...\n", path.c_str(), elems * 4.0 / (1 << 30));
    make_a_file(path, elems, std::max(1u, std::thread::hardware_concurrency()));
  }
  // The file in the page cache: read it once.
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    std::vector<char> buf(8 << 20);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
    ::close(fd);
  }

  cudaDeviceProp prop{};
  WARPSTORE_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  unsigned grid = static_cast<unsigned>(prop.multiProcessorCount * args.count("blocks-per-sm"));
  const std::uint64_t tiles = s.m / tile_rows * std::max(1u, layers);
  if (layers > 0) {
    // A cooperative launch: every block resident at once.
    grid = std::min<unsigned>(grid, static_cast<unsigned>(s.k / tile_rows));
    int per_sm[4] = {};
    WARPSTORE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm[0], layers_kernel<false>, block_threads, 0));
    WARPSTORE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm[1], layers_kernel<true>, block_threads, 0));
    WARPSTORE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm[2], loader_warp_kernel<false>, loader_block_threads, 0));
    WARPSTORE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm[3], loader_warp_kernel<true>, loader_block_threads, 0));
    const unsigned resident =
        static_cast<unsigned>(*std::min_element(per_sm, per_sm + 4) * prop.multiProcessorCount);
    if (grid > resident)
      throw usage_error("--blocks-per-sm: " + std::to_string(grid) + " blocks, only " +
                        std::to_string(resident) + " can be resident for the grid barrier");
  }

  // B (k x n) and C (m x n); for the chain, Y_0 .. Y_layers (each k x n),
  // B is Y_0 and C the rest.
  float* b_dev = nullptr;
  float* c_dev = nullptr;
  unsigned long long* failed_dev = nullptr;
  unsigned long long* phase_dev = nullptr;
  const std::uint64_t c_elems = layers > 0 ? std::uint64_t{layers} * s.k * s.n : s.m * s.n;
  WARPSTORE_CUDA_TRY(cudaMalloc(&phase_dev, phases * sizeof(unsigned long long)));
  WARPSTORE_CUDA_TRY(cudaMalloc(&b_dev, (s.k * s.n + (layers > 0 ? c_elems : 0)) * 4));
  if (layers > 0)
    c_dev = b_dev + s.k * s.n;
  else
    WARPSTORE_CUDA_TRY(cudaMalloc(&c_dev, c_elems * 4));
  WARPSTORE_CUDA_TRY(cudaMalloc(&failed_dev, sizeof(unsigned long long)));
  fill_b<<<256, 256>>>(b_dev, s.k * s.n);
  check_launch("fill_b");
  std::vector<float> b_host(s.k * s.n);
  WARPSTORE_CUDA_TRY(cudaMemcpy(b_host.data(), b_dev, s.k * s.n * 4, cudaMemcpyDeviceToHost));
  const kernel_args base{b_dev, c_dev, s, tiles, failed_dev, phase_dev};
  const layer_args chain{b_dev, s.k,        s.n,       layers,      s.k / tile_rows,
                         alpha, failed_dev, phase_dev, loader_after};

  o.controller = controller_kind::host;
  o.line_size = static_cast<std::uint32_t>(s.k * 4);
  o.direct = direct_io::off;
  array<float> a(path, elems, o);
  const array_ref<float> ref = a.ref();

  const int trials = static_cast<int>(args.count("trials"));
  const int sample = static_cast<int>(args.count("check-rows"));
  const trial_runner runner{trials, tiles, static_cast<double>(elems) * 4, failed_dev, phase_dev};
  auto measure = [&](const char* name, auto&& once) {
    return runner.measure(
        name, [&] { WARPSTORE_CUDA_TRY(cudaMemset(c_dev, 0xFF, c_elems * 4)); }, once,
        [&](std::uint64_t& checked) {
          return layers > 0 ? check_layers(b_dev, s.k, s.n, layers, alpha, sample, false, checked)
                            : check_c(c_dev, s, b_host, sample, checked);
        });
  };
  // async: the batches (prefetch, wait); loader_warp (the chain only): a
  // warp of its own gets the next item ready (loader_warp_kernel).
  auto warpstore_variant = [&](bool async, bool loader_warp = false) {
    return [&, async, loader_warp] {
      a.cache().clear();
      a.cache().reset_stats();
      activity_scope busy(*a.shared_controller());
      gpu_timer timer;
      timer.start();
      if (layers > 0) {
        array_ref<float> r = ref;
        layer_args c = chain;
        void* params[] = {&r, &c};
        const void* kernel =
            loader_warp ? (async ? reinterpret_cast<const void*>(&loader_warp_kernel<true>)
                                 : reinterpret_cast<const void*>(&loader_warp_kernel<false>))
            : async     ? reinterpret_cast<const void*>(&layers_kernel<true>)
                        : reinterpret_cast<const void*>(&layers_kernel<false>);
        WARPSTORE_CUDA_TRY(cudaLaunchCooperativeKernel(
            kernel, dim3(grid), dim3(loader_warp ? loader_block_threads : block_threads), params,
            0, nullptr));
      } else if (async) {
        async_kernel<<<grid, block_threads>>>(ref, base);
      } else {
        sync_kernel<<<grid, block_threads>>>(ref, base);
      }
      timer.stop();
      check_launch(async ? "async_kernel" : "sync_kernel");
      a.check();
      variant_result r;
      r.seconds = timer.seconds();
      return r;
    };
  };
  // Compute alone, A's first chunk already in GPU memory, repeated over the
  // same rows: how long the product takes with no I/O at all. The rows of C
  // of the first chunk come from A's own rows and are checked (wrong ones
  // counted in compute_mismatches, rows checked in compute_checked).
  std::uint64_t compute_mismatches = 0, compute_checked = 0;
  // The chain: layer 0's rows of A in GPU memory stand in for every layer.
  auto compute_only_layers = [&] {
    const std::uint64_t layer_elems = s.k * s.k;
    float* layer = nullptr;
    WARPSTORE_CUDA_TRY(cudaMalloc(&layer, layer_elems * 4));
    std::vector<float> host(layer_elems);
    for (std::uint64_t i = 0; i < host.size(); ++i) host[i] = value_of(i, a_seed);
    WARPSTORE_CUDA_TRY(cudaMemcpy(layer, host.data(), layer_elems * 4, cudaMemcpyHostToDevice));
    WARPSTORE_CUDA_TRY(cudaMemset(c_dev, 0xFF, c_elems * 4));
    gpu_timer timer;
    timer.start();
    for (std::uint32_t l = 0; l < layers; ++l) {
      const kernel_args args{b_dev + std::uint64_t{l} * s.k * s.n,
                             b_dev + (std::uint64_t{l} + 1) * s.k * s.n,
                             s, s.k / tile_rows, failed_dev, nullptr, alpha};
      chunk_kernel<<<grid, block_threads>>>(layer, s.k / tile_rows, 0, args);
    }
    timer.stop();
    check_launch("chunk_kernel");
    const double sec = timer.seconds();
    WARPSTORE_CUDA_TRY(cudaFree(layer));
    compute_mismatches =
        check_layers(b_dev, s.k, s.n, layers, alpha, sample, true, compute_checked);
    return sec;
  };
  auto compute_only = [&] {
    if (layers > 0) return compute_only_layers();
    const std::uint64_t chunk_tiles = std::min<std::uint64_t>(tiles, 1024);
    float* chunk = nullptr;
    WARPSTORE_CUDA_TRY(cudaMalloc(&chunk, chunk_tiles * tile_rows * s.k * 4));
    std::vector<float> host(chunk_tiles * tile_rows * s.k);
    for (std::uint64_t i = 0; i < host.size(); ++i) host[i] = value_of(i, a_seed);
    WARPSTORE_CUDA_TRY(cudaMemcpy(chunk, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    gpu_timer timer;
    timer.start();
    for (std::uint64_t first = 0; first < tiles; first += chunk_tiles)
      chunk_kernel<<<grid, block_threads>>>(chunk, std::min(chunk_tiles, tiles - first), first,
                                            base);
    timer.stop();
    check_launch("chunk_kernel");
    const double sec = timer.seconds();
    WARPSTORE_CUDA_TRY(cudaFree(chunk));
    shape first_chunk = s;
    first_chunk.m = std::min<std::uint64_t>(s.m, chunk_tiles * tile_rows);
    compute_mismatches = check_c(c_dev, first_chunk, b_host, sample, compute_checked);
    return sec;
  };

  std::fprintf(stderr,
               "A %u x %llu x %llu float32 (%.2f GiB, %s), B %llu x %llu, tiles of %d rows, grid "
               "%u x %d, cache %s, %u service threads\n",
               std::max(1u, layers), static_cast<unsigned long long>(s.m),
               static_cast<unsigned long long>(s.k),
               elems * 4.0 / (1 << 30), path.c_str(), static_cast<unsigned long long>(s.k),
               static_cast<unsigned long long>(s.n), tile_rows, grid, block_threads,
               format_size(a.cache().bytes()).c_str(), threads);
  const double compute_s = compute_only();
  std::fprintf(stderr, "  compute alone (A in GPU memory): %.3f s\n", compute_s);
  const variant_result sync = measure("sync", warpstore_variant(false));
  const variant_result async = measure("async", warpstore_variant(true));
  // The chain: both again with a loader warp.
  variant_result sync_lw, async_lw;
  if (layers > 0) {
    sync_lw = measure("sync+lw", warpstore_variant(false, true));
    async_lw = measure("async+lw", warpstore_variant(true, true));
  }
  if (args.flag("no-cpu")) {  // a diagnostic run: the phases above, no rows
    if (args.given("json")) throw usage_error("--no-cpu writes no results: drop --json");
    std::uint64_t bad = 0;
    for (const variant_result& v : {sync, async, sync_lw, async_lw}) bad += v.mismatches + v.failed;
    return bad == 0 ? 0 : 1;
  }
  const std::uint64_t chunk_tiles =
      layers > 0 ? s.k / tile_rows
                 : std::max<std::uint64_t>(1, args.size("cpu-chunk") / (tile_rows * s.k * 4));
  const variant_result cpu = measure("cpu", [&] {
    return layers > 0 ? run_cpu_layers(path, s.k, s.n, layers, b_dev, alpha, threads, grid,
                                       failed_dev)
                      : run_cpu(path, s, base, chunk_tiles, threads, grid);
  });

  const double a_bytes = static_cast<double>(elems) * 4;
  json::object params;
  params.push_back({"m", json::value(static_cast<double>(s.m))});
  params.push_back({"k", json::value(static_cast<double>(s.k))});
  params.push_back({"n", json::value(static_cast<double>(s.n))});
  params.push_back({"tile_rows", json::value(double{tile_rows})});
  params.push_back({"layers", json::value(static_cast<double>(layers))});
  params.push_back({"alpha", json::value(round_significant(alpha, 4))});
  params.push_back({"grid", json::value(static_cast<double>(grid))});
  params.push_back({"service_threads", json::value(static_cast<double>(threads))});
  params.push_back({"cache_bytes", json::value(static_cast<double>(a.cache().bytes()))});
  params.push_back({"cpu_chunk_bytes", json::value(static_cast<double>(chunk_tiles * tile_rows * s.k * 4))});
  params.push_back({"trials", json::value(static_cast<double>(trials))});
  params.push_back({"sync_s", json::value(round_significant(sync.seconds, 4))});
  params.push_back({"async_s", json::value(round_significant(async.seconds, 4))});
  if (layers > 0) {
    params.push_back({"sync_loader_warp_s", json::value(round_significant(sync_lw.seconds, 4))});
    params.push_back({"async_loader_warp_s", json::value(round_significant(async_lw.seconds, 4))});
  }
  params.push_back({"cpu_double_buffer_s", json::value(round_significant(cpu.seconds, 4))});
  params.push_back({"compute_only_s", json::value(round_significant(compute_s, 4))});
  params.push_back({"page_cache", json::value(true)});
  auto gbps = [&](double sec) { return round_significant(gb_per_s(a_bytes, sec), 4); };
  auto row = [&](std::string name, const variant_result& v, std::optional<double> ceiling,
                 std::string ceiling_name, std::uint64_t extra_wrong) {
    result r;
    r.name = std::move(name);
    r.value = gbps(v.seconds);
    r.unit = "GB/s";
    r.ceiling = ceiling;
    r.ceiling_name = std::move(ceiling_name);
    r.verified = true;
    r.mismatches = v.mismatches + v.failed + extra_wrong;
    r.params = params;
    return r;
  };
  const std::string tag = args.str("tag").empty() ? "" : "." + args.str("tag");
  std::vector<result> results;
  auto wrong = [](const variant_result& v) { return v.mismatches + v.failed; };
  // The figure: the faster async kernel against the faster sync kernel
  // (the chain: with a loader warp both, where it pays). Beside it, for the
  // chain, what the batches gain against the plain sync kernel, and the
  // batches used by the computing warps themselves.
  const bool lw_async = layers > 0 && async_lw.seconds < async.seconds;
  const bool lw_sync = layers > 0 && sync_lw.seconds < sync.seconds;
  const variant_result& best_async = lw_async ? async_lw : async;
  const variant_result& best_sync = lw_sync ? sync_lw : sync;
  results.push_back(row("async.kernel.vs_sync" + tag, best_async, gbps(best_sync.seconds),
                        (lw_sync ? "async.kernel.sync_loader_warp" : "async.kernel.sync") + tag,
                        wrong(best_sync)));
  if (layers > 0) {
    results.back().params.push_back(
        {"async_kernel", json::value(lw_async ? "loader warp" : "same warps")});
    results.push_back(row("async.kernel.vs_sync.plain" + tag, best_async, gbps(sync.seconds),
                          "async.kernel.sync" + tag, wrong(sync)));
    results.push_back(row("async.kernel.vs_sync.same_warps" + tag, async, gbps(sync.seconds),
                          "async.kernel.sync" + tag, wrong(sync)));
  }
  results.push_back(row("async.kernel.vs_cpu_double_buffer" + tag, best_async, gbps(cpu.seconds),
                        "async.kernel.cpu_double_buffer" + tag, wrong(cpu)));
  results.push_back(row("async.kernel.sync" + tag, sync, std::nullopt, "", 0));
  results.push_back(row("async.kernel.cpu_double_buffer" + tag, cpu, std::nullopt, "", 0));
  if (layers > 0) {
    results.push_back(row("async.kernel.sync_loader_warp" + tag, sync_lw, std::nullopt, "", 0));
    results.push_back(row("async.kernel.async_same_warps" + tag, async, std::nullopt, "", 0));
    results.push_back(row("async.kernel.async_loader_warp" + tag, async_lw, std::nullopt, "", 0));
  } else {
    results.push_back(row("async.kernel.async" + tag, async, std::nullopt, "", 0));
  }
  {
    result r;
    r.name = "async.kernel.compute_only" + tag;
    r.value = gbps(compute_s);
    r.unit = "GB/s";
    r.verified = compute_checked > 0;
    r.mismatches = compute_mismatches;
    r.params = params;
    results.push_back(r);
  }
  std::fputs(results_table(results).c_str(), stdout);
  const cache_stats st = a.stats();
  std::printf("cache (last trial): hits %llu misses %llu evictions %llu retries %llu errors %llu\n",
              static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
              static_cast<unsigned long long>(st.evictions),
              static_cast<unsigned long long>(st.retries),
              static_cast<unsigned long long>(st.errors));
  if (args.given("json")) {
    write_results(args.str("json"), run_info::now("async", prop.name, args.command_line()),
                  results);
    std::printf("results: %s\n", args.str("json").c_str());
  }
  bool bad = false;
  for (const result& r : results) bad = bad || r.mismatches != 0;
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  arg_parser parser("async-kernel-bench",
                    "Tiled out-of-core C = A * B: warpstore sync, warpstore async (prefetch, "
                    "double-buffered) and CPU double buffering (pread + cudaMemcpyAsync)");
  parser.common()
      .option("file", "PATH", "/tmp/warpstore-async-a.f32", "the A file (made if missing or wrong)")
      .option("a-bytes", "BYTES", "2GiB", "size of A (rounded down to whole tiles; not with --layers)")
      .option("layers", "COUNT", "0",
              "A is a chain of COUNT square K x K layers, Y_l = alpha * A_l * Y_{l-1} (0: one "
              "A of --a-bytes, independent tiles)")
      .option("k", "COUNT", "1024", "columns of A (a row is one cache line: 4 * K bytes)")
      .option("n", "COUNT", "2048", "columns of B and C (a multiple of 256): compute per byte of A")
      .option("blocks-per-sm", "COUNT", "1", "blocks per multiprocessor in the grid (the kernels take a multiprocessor's registers: one is resident at a time; the chain refuses more)")
      .option("cpu-chunk", "BYTES", "32MiB", "rows per pread + copy in the cpu variant (with --layers: a layer)")
      .option("trials", "COUNT", "3", "runs of each variant (median reported)")
      .option("check-rows", "COUNT", "32", "rows of C checked against the CPU reference, per trial")
      .option("json", "PATH", "", "merge the results into this results file")
      .option("tag", "TEXT", "", "suffix of the result names (async.kernel.vs_sync.TEXT)")
      .flag("no-cpu", "skip the cpu variant and write no rows (a diagnostic run of sync and async)")
      .flag("loader-after-compute",
            "a diagnostic of the chain (with --no-cpu): the loader warp gets the next tile ready "
            "after the block computed this one, not beside it, so the compute phase shows what "
            "the loader's work costs the computing warps");
  declare_options(parser.common(),
                  {{"cache_bytes", "1GiB"},
                   {"service_threads", "8", "host controller service threads, and pread threads "
                                            "of the cpu variant"}});
  try {
    const parsed_args args = parser.parse(argc, argv);
    if (args.wants_help()) {
      std::fputs(parser.help().c_str(), stdout);
      return 0;
    }
    return run(args);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "async-kernel-bench: %s\n%s", e.what(), parser.help().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "async-kernel-bench: %s\n", e.what());
    return 1;
  }
}
