// The GPU gather kernels and their launches (gather_gpu.cu calls them),
// written once and compiled once per word size: python/CMakeLists.txt makes
// a unit of gather_word.cu.in for each of 1, 2, 4, 8 and 16 bytes, so the
// five build side by side rather than in one long compile.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>

#include "gather.cuh"
#include "gather.h"
#include "gather_sort.h"
#include "warpstore/cuda_check.h"

namespace warpstore::python {

// Launches a gather of n positions of words W on `s` with the slot's
// record (the last block hands it to slot.host). Defined below; each word
// size is instantiated in its own unit.
template <class W>
void launch_word(const erased_array& ea, const void* idx, std::uint32_t index_bytes,
                 std::uint64_t n, void* out, cudaStream_t s, call_slot& slot);

namespace {

constexpr unsigned block_threads = 256;
// Where a gather runs, beside a training step's kernels (fetch-ahead).
// By default (options::gather_sm_share 0) on every multiprocessor: at most 80
// registers a thread (three blocks' worth of a register file) and two
// resident blocks a multiprocessor, so 40 % of every register file stays
// free. At 128 registers two blocks filled it, nothing ran beside a gather,
// and a GraphSAGE step waited for its whole fetch (measured on an H100,
// 2026-11-25: the exposed fetch went from 46 % of the epoch to 8 %). A large
// matrix product, whose block wants a whole multiprocessor, still waits
// (engine.gpu_op.beside_gather). With gather_sm_share N the gather runs on
// 1/N of the multiprocessors in blocks of wide_threads at 64 registers (the
// scheduler puts one such block on a multiprocessor), leaving the others
// whole; measured with N = 4 that freed the product but halved the gather's
// rate while a warp's queue pair followed its multiprocessor (queue_spread
// spreads them). See BENCHMARKS.md.
constexpr int min_blocks_per_sm = 3;
constexpr std::uint64_t resident_blocks_per_sm = 2;
constexpr unsigned wide_threads = 1024;

// A multiprocessor splits its on-chip memory between L1 and shared memory
// for the blocks resident on it, and blocks of another split wait until it
// empties. A gather kernel uses no shared memory, so by default it would
// take the split with the least, and a kernel that wants the most would
// queue behind it: the gather asks for the most.
template <auto Kernel>
void prefer_shared_memory() {
  static const cudaError_t once = cudaFuncSetAttribute(
      Kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  WARPSTORE_CUDA_TRY(once);
}

// The row kernel for `group` lanes a row: a warp a row (32) or several.
template <auto WarpARow, auto Lanes>
auto rows_kernel(unsigned group) {
  if (group == 32) {
    prefer_shared_memory<WarpARow>();
    return WarpARow;
  }
  prefer_shared_memory<Lanes>();
  return Lanes;
}

int multiprocessors() {
  int device = 0, sms = 0;
  WARPSTORE_CUDA_TRY(cudaGetDevice(&device));
  WARPSTORE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms > 0 ? sms : 1;
}

// Blocks for `items` threads' or warps' worth of work, `per_block` a block,
// at most `most`.
std::uint64_t grid_for(std::uint64_t items, std::uint64_t per_block, std::uint64_t most) {
  return std::max<std::uint64_t>(1, std::min((items + per_block - 1) / per_block, most));
}

template <class W, class I>
__device__ void elements_body(const array_ref<W>& a, const I* idx, W* out, std::uint64_t n,
                              call_record* rec) {
  const std::uint64_t threads = gridDim.x * std::uint64_t{blockDim.x};
  // Whole warps walk the elements together (lanes of one line share its lookup).
  for (std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; k < n; k += threads)
    gather_element(a, idx, out, k, &rec->first_bad, &rec->cancel);
}

// Lanes a row (a power of two) for a gather of n rows by `warps` warps.
// Several rows a warp only where the lookups are what a gather waits on:
// over the memory controller while its gathers hit (no miss admission). A
// gather that misses waits on random reads of host memory (about 60 M rows
// a second however they are issued), and several rows a warp made it 11 %
// slower there (128 B rows, 8 K, H100); through queues (host controller)
// it was not measured. Then a row a warp while the warps outnumber the
// rows (a small gather's time is its slowest warp), more rows a warp as
// the batch grows, down to row_group_lanes.
template <class W>
unsigned lanes_per_row(const array_ref<W>& a, std::uint64_t n, std::uint64_t row_words,
                       std::uint64_t warps) {
  if (!a.reads_around() || a.admit_misses > 1) return 32;
  const std::uint64_t most = 32 / row_group_lanes(row_words);
  std::uint64_t per_warp = 1;
  while (per_warp < most && per_warp * warps < n) per_warp *= 2;
  return static_cast<unsigned>(32 / per_warp);
}

// Lanes: several rows a warp (group lanes a row, below 32), a kernel of its
// own: with both ways in one kernel, a warp a row spilled half as much again.
template <bool Lanes, class W, class I>
__device__ void rows_body(const array_ref<W>& a, std::uint64_t rows, std::uint64_t row_words,
                          const I* idx, W* out, std::uint64_t n, call_record* rec,
                          unsigned group) {
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  const std::uint64_t first = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  if constexpr (!Lanes) {
    // k is the same for every lane of a warp: each warp walks its rows whole.
    for (std::uint64_t k = first; k < n; k += warps)
      gather_row(a, rows, row_words, idx, out, k, &rec->first_bad, &rec->cancel);
    (void)group;
    return;
  }
  // Each warp reads `per_warp` rows at once, `group` lanes a row; base is
  // the same for every lane, so the whole warp calls gather_row_lanes together.
  const unsigned per_warp = 32 / group;
  const unsigned lane = detail::warp::lane();
  for (std::uint64_t base = first * per_warp; base < n; base += warps * per_warp) {
    const std::uint64_t k = base + lane / group;
    gather_row_lanes(a, detail::warp::active_mask(), k < n, rows, row_words, idx, out, k,
                     &rec->first_bad, &rec->cancel, group, lane % group);
  }
}

// Where a gather that informs the next one's order (erased_array::sorts)
// finds the cache's counters; shards 0 for any other.
struct cache_sample {
  const cache_counters* counters = nullptr;
  std::uint32_t shards = 0;
};

// Every block, at its end: the last block of the grid to end copies the
// call's record to the mapped host copy and resets it for the next call.
// The other blocks' records (errors, first_bad, cancel) are visible to it:
// each block fences before it counts itself done. With a cache sample its
// first warp adds up the counters' shards into the host copy's totals.
__device__ void hand_over_record(call_record* rec, call_record* host, cache_sample sample) {
  __shared__ bool last;
  __syncthreads();  // the block's reads and records are done
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(&rec->blocks_done, 1u) + 1 == gridDim.x;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  unsigned long long lookups = 0, misses = 0;
  for (std::uint32_t i = threadIdx.x; i < sample.shards; i += 32) {
    const cache_counters& c = sample.counters[i];
    const auto ld = [](const std::uint64_t& v) {
      return __ldcg(reinterpret_cast<const unsigned long long*>(&v));
    };
    const unsigned long long fills = ld(c.misses) + ld(c.read_around);
    misses += fills;
    lookups += ld(c.hits) + fills;
  }
  for (int d = 16; d > 0; d /= 2) {
    lookups += __shfl_down_sync(0xffffffffu, lookups, d);
    misses += __shfl_down_sync(0xffffffffu, misses, d);
  }
  if (threadIdx.x != 0) return;
  __threadfence();
  // L2 reads (not L1): other blocks wrote these on other multiprocessors.
  constexpr unsigned words = sizeof(call_record) / sizeof(unsigned long long);
  static_assert(sizeof(call_record) % sizeof(unsigned long long) == 0);
  auto* src = reinterpret_cast<unsigned long long*>(rec);
  auto* dst = reinterpret_cast<volatile unsigned long long*>(host);
  for (unsigned w = 0; w < words; ++w) dst[w] = __ldcg(src + w);
  const call_record fresh = fresh_call_record();
  const auto* f = reinterpret_cast<const unsigned long long*>(&fresh);
  for (unsigned w = 0; w < words; ++w) __stcg(src + w, f[w]);
  // The device record never holds totals: they go to the host copy alone.
  reinterpret_cast<volatile std::uint64_t&>(host->cache_lookups) = lookups;
  reinterpret_cast<volatile std::uint64_t&>(host->cache_misses) = misses;
  __threadfence_system();  // the host copy is out before the kernel ends
}

template <class W, class I>
__global__ void __launch_bounds__(block_threads, min_blocks_per_sm)
    gather_elements_kernel(array_ref<W> a, const I* idx, W* out, std::uint64_t n, call_record* rec,
                           call_record* host, cache_sample sample) {
  elements_body(a, idx, out, n, rec);
  hand_over_record(rec, host, sample);
}

// MinBlocks: min_blocks_per_sm, or 1 for a gather of one wave (launch).
template <bool Lanes, int MinBlocks, class W, class I>
__global__ void __launch_bounds__(block_threads, MinBlocks)
    gather_rows_kernel(array_ref<W> a, std::uint64_t rows, std::uint64_t row_words, const I* idx,
                       W* out, std::uint64_t n, call_record* rec, call_record* host,
                       cache_sample sample, unsigned group) {
  rows_body<Lanes>(a, rows, row_words, idx, out, n, rec, group);
  hand_over_record(rec, host, sample);
}

template <class W, class I>
__global__ void __launch_bounds__(wide_threads, 1)
    wide_elements_kernel(array_ref<W> a, const I* idx, W* out, std::uint64_t n, call_record* rec,
                         call_record* host, cache_sample sample) {
  elements_body(a, idx, out, n, rec);
  hand_over_record(rec, host, sample);
}

template <bool Lanes, class W, class I>
__global__ void __launch_bounds__(wide_threads, 1)
    wide_rows_kernel(array_ref<W> a, std::uint64_t rows, std::uint64_t row_words, const I* idx,
                     W* out, std::uint64_t n, call_record* rec, call_record* host,
                     cache_sample sample, unsigned group) {
  rows_body<Lanes>(a, rows, row_words, idx, out, n, rec, group);
  hand_over_record(rec, host, sample);
}

// Sorted gathers (erased_array::sorts). A GPU reads random rows of host
// memory at about 60 M a second whatever their size: its translations of
// host pages miss once the rows spread over more than about 512 MiB. The
// same rows in file order, a batch's reads in flight at once falling on a
// few pages, read 1.6 to 2.8 times as fast in batches of 64 K (H200,
// bench/host_read_probe.cu: 64 K random 128 B rows of 2 GiB 61 M/s, sorted
// 168 M/s; 512 B rows 61 M/s and 100 M/s, the link's 51 GB/s). So a large
// gather that misses sorts its (row, position) pairs first (a radix sort
// over the bits of the row count) and walks them in row order, each row
// going to its position.

// Keys: the row (or element) of each position, or `end` where the index is
// out of range (noted; such keys sort last and are skipped). Values: the
// positions.
template <class I>
__global__ void sort_keys_kernel(const I* idx, std::uint64_t n, std::uint64_t end,
                                 std::uint64_t* keys, std::uint32_t* pos, call_record* rec) {
  const std::uint64_t threads = gridDim.x * std::uint64_t{blockDim.x};
  for (std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; k < n;
       k += threads) {
    std::uint64_t i = 0;
    if (!resolve_index(idx[k], end, i)) {
      i = end;
      note_bad_position(&rec->first_bad, k);
    }
    keys[k] = i;
    pos[k] = static_cast<std::uint32_t>(k);
  }
}

template <class W>
__global__ void __launch_bounds__(block_threads, min_blocks_per_sm)
    sorted_elements_kernel(array_ref<W> a, const std::uint64_t* keys, const std::uint32_t* pos,
                           W* out, std::uint64_t n, call_record* rec, call_record* host,
                           cache_sample sample) {
  const std::uint64_t threads = gridDim.x * std::uint64_t{blockDim.x};
  for (std::uint64_t k = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; k < n;
       k += threads) {
    if (cancelled_for(detail::warp::active_mask(), &rec->cancel)) break;
    const std::uint64_t i = keys[k];
    out[pos[k]] = i < a.size() ? a[i] : W{};
  }
  hand_over_record(rec, host, sample);
}

template <class W>
__global__ void __launch_bounds__(block_threads, min_blocks_per_sm)
    sorted_rows_kernel(array_ref<W> a, std::uint64_t rows, std::uint64_t row_words,
                       const std::uint64_t* keys, const std::uint32_t* pos, W* out, std::uint64_t n,
                       call_record* rec, call_record* host, cache_sample sample,
                       std::uint32_t run) {
  const std::uint64_t warps = gridDim.x * std::uint64_t{blockDim.x} / 32;
  // Each warp takes `run` neighbours of the sorted order (rows that share a
  // line fill it once, not once a warp that waits on the other's fill), the
  // warps together a window of neighbours: what is in flight at once stays
  // within a few pages of host memory. k is the same for every lane.
  const std::uint64_t runs = (n + run - 1) / run;
  for (std::uint64_t c = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32; c < runs;
       c += warps) {
    const std::uint64_t end = std::min(n, (c + 1) * run);
    for (std::uint64_t k = c * run; k < end; ++k) {
      if (cancelled_for(detail::warp::active_mask(), &rec->cancel)) break;
      const std::uint64_t r = keys[k];
      if (r < rows) read_row(a, r, row_words, out + std::uint64_t{pos[k]} * row_words);
    }
  }
  hand_over_record(rec, host, sample);
}

constexpr std::size_t sort_align = 256;
std::size_t aligned(std::size_t b) {
  return (b + sort_align - 1) & ~(sort_align - 1);
}

// The slot's sort space, at least `bytes` (grown to a power of two; the
// slot's previous call is over, so its old space is free).
void* sort_space(call_slot& slot, std::size_t bytes) {
  if (slot.sort_bytes < bytes) {
    const std::size_t want = std::bit_ceil(std::max<std::size_t>(bytes, std::size_t{1} << 20));
    if (slot.sort_space != nullptr) WARPSTORE_CUDA_TRY(cudaFree(slot.sort_space));
    slot.sort_space = nullptr;
    slot.sort_bytes = 0;
    WARPSTORE_CUDA_TRY(cudaMalloc(&slot.sort_space, want));
    slot.sort_bytes = want;
  }
  return slot.sort_space;
}

template <class W, class I>
void launch_sorted(const erased_array& ea, const array_ref<W>& a, const I* idx, std::uint64_t n,
                   W* out, cudaStream_t s, call_slot& slot, cache_sample sample) {
  const std::uint64_t end = ea.rows();  // past every row (elements of a 1-D array)
  const int end_bit = static_cast<int>(std::bit_width(end));
  const std::size_t key_bytes = aligned(n * 8), pos_bytes = aligned(n * 4);
  const std::size_t temp_bytes = radix_sort_scratch(n, end_bit);
  auto* base = static_cast<std::byte*>(
      sort_space(slot, 2 * key_bytes + 2 * pos_bytes + aligned(temp_bytes)));
  sort_buffers b;
  b.keys[0] = reinterpret_cast<std::uint64_t*>(base);
  b.keys[1] = reinterpret_cast<std::uint64_t*>(base + key_bytes);
  base += 2 * key_bytes;
  b.pos[0] = reinterpret_cast<std::uint32_t*>(base);
  b.pos[1] = reinterpret_cast<std::uint32_t*>(base + pos_bytes);
  void* temp = base + 2 * pos_bytes;
  const auto sms = static_cast<std::uint64_t>(multiprocessors());
  sort_keys_kernel<<<static_cast<unsigned>(grid_for(n, block_threads, 4 * sms)), block_threads, 0,
                     s>>>(idx, n, end, b.keys[0], b.pos[0], slot.device);
  WARPSTORE_CHECK_LAUNCH();
  radix_sort_pairs(temp, temp_bytes, b, n, end_bit, s);
  const std::uint64_t* keys = b.keys[b.key_current];
  const std::uint32_t* pos = b.pos[b.pos_current];
  const std::uint64_t row_words = ea.row_bytes() / sizeof(W);
  if (row_words == 1) {
    prefer_shared_memory<sorted_elements_kernel<W>>();
    sorted_elements_kernel<<<static_cast<unsigned>(
                                 grid_for(n, block_threads, resident_blocks_per_sm * sms)),
                             block_threads, 0, s>>>(a, keys, pos, out, n, slot.device, slot.host,
                                                    sample);
  } else {
    // Rows a line holds, at most 8 (a window of 8 x 2 K warps stays a
    // small part of a batch spread over the file).
    const std::uint64_t row_bytes = ea.row_bytes();
    const auto run =
        static_cast<std::uint32_t>(std::clamp<std::uint64_t>(a.cache.line_size / row_bytes, 1, 8));
    prefer_shared_memory<sorted_rows_kernel<W>>();
    sorted_rows_kernel<<<static_cast<unsigned>(grid_for((n + run - 1) / run, block_threads / 32,
                                                        resident_blocks_per_sm * sms)),
                         block_threads, 0, s>>>(a, ea.rows(), row_words, keys, pos, out, n,
                                                slot.device, slot.host, sample, run);
  }
  WARPSTORE_CHECK_LAUNCH();
}

template <class W, class I>
void launch(const erased_array& ea, const I* idx, std::uint64_t n, W* out, cudaStream_t s,
            call_slot& slot) {
  call_record* rec = slot.device;
  call_record* host = slot.host;
  // Quiet: the service threads are woken by whoever waits for the gather
  // (gather: once it runs past late_wait_ns; gather_async: at once).
  array_ref<W> a = static_cast<const array<W>&>(ea.base()).quiet_ref();
  a.errors = &rec->errors;  // this call's errors, not the array's
  cache_sample sample;
  if (ea.samples_cache(n)) sample = {a.cache.counters, a.cache.counter_shards};
  const bool sorted = ea.sorts(n);
  // The array's gathers miss almost always: most misses read around. Not
  // in a sorted gather, whose neighbours share the lines it fills.
  if (const std::uint32_t admit = ea.admit_misses(); !sorted && admit > 1 && a.reads_around()) {
    a.admit_misses = admit;
    ea.count_admitting();
  }
  if (sorted) {
    launch_sorted<W, I>(ea, a, idx, n, out, s, slot, sample);
    ea.count_sorted();
    return;
  }
  const std::uint64_t row_words = ea.row_bytes() / sizeof(W);
  const auto sms = static_cast<std::uint64_t>(multiprocessors());
  // Grid-stride loops over resident blocks only: 16 warps a multiprocessor,
  // two thousand on an H100, keep more misses in flight than the controller
  // serves at once.
  if (const std::uint64_t share = ea.gather_sm_share(); share != 0) {
    const std::uint64_t most = std::max<std::uint64_t>(1, sms / share);
    if (row_words == 1) {
      prefer_shared_memory<wide_elements_kernel<W, I>>();
      wide_elements_kernel<<<static_cast<unsigned>(grid_for(n, wide_threads, most)), wide_threads,
                             0, s>>>(a, idx, out, n, rec, host, sample);
    } else {
      const unsigned group = lanes_per_row(a, n, row_words, most * (wide_threads / 32));
      const auto kernel =
          rows_kernel<wide_rows_kernel<false, W, I>, wide_rows_kernel<true, W, I>>(group);
      kernel<<<static_cast<unsigned>(grid_for(n, wide_threads / group, most)), wide_threads, 0,
               s>>>(a, ea.rows(), row_words, idx, out, n, rec, host, sample, group);
    }
  } else if (row_words == 1) {
    prefer_shared_memory<gather_elements_kernel<W, I>>();
    gather_elements_kernel<<<static_cast<unsigned>(
                                 grid_for(n, block_threads, resident_blocks_per_sm * sms)),
                             block_threads, 0, s>>>(a, idx, out, n, rec, host, sample);
  } else {
    const std::uint64_t most = resident_blocks_per_sm * sms;
    const unsigned group = lanes_per_row(a, n, row_words, most * (block_threads / 32));
    auto kernel = rows_kernel<gather_rows_kernel<false, min_blocks_per_sm, W, I>,
                              gather_rows_kernel<true, min_blocks_per_sm, W, I>>(group);
    // A gather of one wave (a row a warp, one block a multiprocessor: 1,056
    // rows on an H200) takes the kernel bounded to one block, which keeps
    // all the registers its lookups want (210 to 236 a thread). Under the
    // bound of 80, ptxas spills (890 bytes of spill stores and 1,536 of
    // spill loads in the 16-byte-word kernel), and a 1 K-row gather that
    // hits makes about 110 local-memory requests a warp (ncu, H200,
    // 2026-12-02). A gather that small is done in microseconds, so holding
    // the register file that long keeps nothing else out for long. Measured
    // there (medians of synchronised calls, every call checked, two builds
    // alternating in one call): 1 K rows of 128 B, 512 B and 4 KiB 2 to 4 us
    // faster a call (from 31 to 33 us) when they hit and 2 to 8 us (from 45
    // to 120) when they miss. Larger gathers keep the bound: without it, 8 K
    // rows of 4 KiB that hit ran 12 us slower (76 to 88 us: copies want the
    // warps in flight), 64 K rows of 128 B that miss 22 % slower (an earlier
    // probe), and 8 K rows of 128 B and 512 B only 1 to 7 % faster.
    if (group == 32 && n <= sms * (block_threads / 32)) {
      prefer_shared_memory<gather_rows_kernel<false, 1, W, I>>();
      kernel = gather_rows_kernel<false, 1, W, I>;
    }
    kernel<<<static_cast<unsigned>(grid_for(n, block_threads / group, most)), block_threads, 0,
             s>>>(a, ea.rows(), row_words, idx, out, n, rec, host, sample, group);
  }
  WARPSTORE_CHECK_LAUNCH();
}

}  // namespace

template <class W>
void launch_word(const erased_array& ea, const void* idx, std::uint32_t index_bytes,
                 std::uint64_t n, void* out, cudaStream_t s, call_slot& slot) {
  if (index_bytes == 4)
    launch(ea, static_cast<const std::int32_t*>(idx), n, static_cast<W*>(out), s, slot);
  else
    launch(ea, static_cast<const std::int64_t*>(idx), n, static_cast<W*>(out), s, slot);
}

}  // namespace warpstore::python
