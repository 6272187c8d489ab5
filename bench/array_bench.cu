// warpstore-bench array: element reads through the cache.
//
// cold  The cache starts empty; thread t's read r asks for one element of
//       line trace.index(r * threads + t), so nearly every read misses. The
//       figure is the bytes brought into the cache per second (misses x line
//       size); the ceiling is the same trace of lines copied by the
//       pinned-memory kernel (memory controller) or read by raw io_uring with
//       the service threads' count and ring depth (host controller).
// hot   A region of half the cache is read once to warm it, then warps read
//       it again and again with coalesced 4-byte loads, three ways: through
//       pinned lines, 32 pinned per warp at once (the figure); one line
//       pinned per warp (.warpline); and operator[] for every read
//       (.operator). The ceiling is a plain kernel reading as many bytes of
//       GPU memory with the same loads.
//
// Every value read is checked: cold reads element by element against the
// file pattern, hot reads by a sum compared with the pattern's sum.
#include <algorithm>
#include <memory>
#include <sstream>
#include <thread>

#include "bench/ceilings/kernels.cuh"
#include "bench/subcommands.h"
#include "support/setting_options.h"
#include "support/gpu.cuh"
#include "support/pattern.cuh"
#include "support/timing.h"
#include "warpstore/array.cuh"

namespace warpstore::bench {

namespace {

// The pattern value of element e of an array of T at the start of the file.
template <class T>
__device__ T expected_element(std::uint64_t e, std::uint64_t seed) {
  const std::uint64_t off = e * sizeof(T);
  return static_cast<T>(tools::pattern_word(off & ~std::uint64_t{7}, seed) >> (8 * (off & 7)));
}

__global__ void cold_kernel(array_ref<std::uint64_t> a, trace tr, std::uint64_t threads,
                            std::uint32_t rounds, std::uint64_t seed, unsigned long long* wrong) {
  const std::uint64_t tid = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= threads) return;
  const std::uint32_t shift = a.elems_per_line_log2;
  unsigned long long bad = 0;
  for (std::uint32_t r = 0; r < rounds; ++r) {
    const std::uint64_t line = tr.index(static_cast<std::uint64_t>(r) * threads + tid);
    const std::uint64_t e = (line << shift) + (tid & ((1ull << shift) - 1));
    bad += a[e] != expected_element<std::uint64_t>(e, seed) ? 1 : 0;
  }
  if (bad) atomicAdd(wrong, bad);
}

// Warps walk the region in chunks of 32 consecutive elements, `passes` times.
__global__ void hot_kernel(array_ref<std::uint32_t> a, std::uint64_t elems, std::uint32_t passes,
                           unsigned long long* sum) {
  const std::uint64_t warp = (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::uint64_t warps = static_cast<std::uint64_t>(gridDim.x) * blockDim.x / 32;
  const unsigned lane = threadIdx.x % 32;
  const std::uint64_t chunks = elems / 32;
  unsigned long long s = 0;
  for (std::uint32_t p = 0; p < passes; ++p)
    for (std::uint64_t c = warp; c < chunks; c += warps) s += a[c * 32 + lane];
  s = warpstore::detail::warp::sum(0xFFFFFFFFu, s);
  if (lane == 0) atomicAdd(sum, s);
}

// Sum of one pinned line read by a whole warp with coalesced 4-byte loads,
// `U` independent loads in flight per lane (a loop with a run-time bound
// and one load per step keeps a single load in flight: latency, not
// bandwidth, would then set the figure).
template <int U>
__device__ unsigned long long sum_line_chunks(const std::uint32_t* d, std::uint32_t per_lane, unsigned lane) {
  unsigned long long s = 0;
  for (std::uint32_t c = 0; c < per_lane; c += U) {
    std::uint32_t v[U];
#pragma unroll
    for (int j = 0; j < U; ++j) v[j] = d[(c + j) * 32 + lane];
#pragma unroll
    for (int j = 0; j < U; ++j) s += v[j];
  }
  return s;
}

// Lines hold at least 128 elements (512 B), so per_lane is a multiple of 4.
__device__ unsigned long long sum_line(const std::uint32_t* d, std::uint64_t per_line, unsigned lane) {
  const auto per_lane = static_cast<std::uint32_t>(per_line / 32);
  return per_lane % 16 == 0 ? sum_line_chunks<16>(d, per_lane, lane) : sum_line_chunks<4>(d, per_lane, lane);
}

// The same walk through the pinned-line accessor, one line per warp: the
// warp pins a line together, reads all of it with plain loads (no atomics per
// read) and unpins it with one atomic.
__global__ void hot_warp_line_kernel(array_ref<std::uint32_t> a, std::uint64_t elems,
                                     std::uint32_t passes, unsigned long long* sum) {
  const std::uint64_t warp = (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::uint64_t warps = static_cast<std::uint64_t>(gridDim.x) * blockDim.x / 32;
  const unsigned lane = threadIdx.x % 32;
  const std::uint64_t per_line = 1ull << a.elems_per_line_log2;
  const std::uint64_t lines = elems / per_line;
  unsigned long long s = 0;
  for (std::uint32_t p = 0; p < passes; ++p)
    for (std::uint64_t l = warp; l < lines; l += warps) {
      pinned_line<std::uint32_t> line = a.pin(l * per_line + lane);
      if (line.valid()) s += sum_line(line.data, per_line, lane);
      line.release_together(0xFFFFFFFFu);
    }
  s = warpstore::detail::warp::sum(0xFFFFFFFFu, s);
  if (lane == 0) atomicAdd(sum, s);
}

// The walk with 32 lines pinned per warp at once: each lane pins its own line
// in one collective pin() (the 32 lookups overlap instead of following each
// other), then the warp reads the lines one after another with coalesced
// loads, and each lane unpins its line.
__global__ void hot_pinned_kernel(array_ref<std::uint32_t> a, std::uint64_t elems, std::uint32_t passes,
                                  unsigned long long* sum) {
  const std::uint64_t warp = (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::uint64_t warps = static_cast<std::uint64_t>(gridDim.x) * blockDim.x / 32;
  const unsigned lane = threadIdx.x % 32;
  const std::uint64_t per_line = 1ull << a.elems_per_line_log2;
  const std::uint64_t lines = elems / per_line;
  const std::uint64_t groups = (lines + 31) / 32;
  unsigned long long s = 0;
  for (std::uint32_t p = 0; p < passes; ++p)
    for (std::uint64_t g = warp; g < groups; g += warps) {
      const std::uint64_t l = g * 32 + lane;
      pinned_line<std::uint32_t> line;
      if (l < lines) line = a.pin(l * per_line);
      unsigned have = __ballot_sync(0xFFFFFFFFu, line.valid());
      while (have != 0) {
        const int j = __ffs(have) - 1;
        have &= have - 1;
        const auto* d = reinterpret_cast<const std::uint32_t*>(
            __shfl_sync(0xFFFFFFFFu, reinterpret_cast<unsigned long long>(line.data), j));
        s += sum_line(d, per_line, lane);
      }
      __syncwarp();
      line.release();
    }
  s = warpstore::detail::warp::sum(0xFFFFFFFFu, s);
  if (lane == 0) atomicAdd(sum, s);
}

// The sum hot_kernel must find, from the pattern alone.
__global__ void hot_expected_kernel(std::uint64_t elems, std::uint32_t passes, std::uint64_t seed,
                                    unsigned long long* sum) {
  const std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t n = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long s = 0;
  for (std::uint64_t e = t; e < elems / 32 * 32; e += n) s += expected_element<std::uint32_t>(e, seed);
  atomicAdd(sum, s * passes);
}

struct counter {
  runtime::device_ptr<unsigned long long> p = runtime::make_device<unsigned long long>(1);
  void reset() { runtime::memset_device(p.get(), 0, sizeof(unsigned long long)); }
  unsigned long long value() const {
    unsigned long long v = 0;
    runtime::copy_to_host(&v, p.get(), sizeof v);
    return v;
  }
};

cache_stats operator-(const cache_stats& a, const cache_stats& b) {
  cache_stats d;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.evictions = a.evictions - b.evictions;
  d.bytes_read = a.bytes_read - b.bytes_read;
  d.retries = a.retries - b.retries;
  d.errors = a.errors - b.errors;
  return d;
}

}  // namespace

void declare_array(command_spec& cmd) {
  declare_file_options(cmd);
  declare_trace_options(cmd);
  declare_controller_options(cmd);
  declare_options(cmd, {{"cache_bytes", "4GiB"}, {"ways"}});
  cmd.option("mode", "cold|hot", "cold", "cold: misses from storage; hot: coalesced reads of cached lines")
      .option("threads", "LIST", "1M", "GPU threads (cold); a list sweeps, e.g. 1K,16K,256K,1M")
      .option("block-threads", "N", "256", "threads per thread block (multiple of 32)")
      .option("reads-per-thread", "N", "1", "cold reads per thread")
      .option("line-size", "LIST", "4K", "cache line sizes; a list sweeps, e.g. 512,4K,64K")
      .option("hot-passes", "N", "20", "hot: timed passes over the region")
      .option("figure", "gbps|lines", "gbps",
              "cold: which figure carries the result name (the other gets a suffix)")
      .option("name", "NAME", "", "result name (with one configuration) [default: derived]")
      .flag("no-ceiling", "skip the ceiling measurement");
}

void run_array(const parsed_args& args, report& out) {
  options opts = controller_options(args);
  const bool hot = args.choice("mode", {"cold", "hot"}) == "hot";
  const bool host = opts.controller == controller_kind::host;
  std::vector<std::uint64_t> thread_counts, line_sizes;
  for (const std::string& s : args.list("threads")) thread_counts.push_back(parse_size(s));
  for (const std::string& s : args.list("line-size")) line_sizes.push_back(parse_size(s));
  if (thread_counts.empty() || line_sizes.empty()) throw usage_error("--threads and --line-size need values");
  const std::uint64_t block_threads = checked_block_threads(args);
  const auto rounds = static_cast<std::uint32_t>(args.count("reads-per-thread"));
  const bool sweep = thread_counts.size() > 1 || line_sizes.size() > 1;
  if (sweep && !args.str("name").empty()) throw usage_error("--name takes one configuration, not a sweep");
  // Host controller staging slots hold the largest line of the sweep.
  opts.line_size = static_cast<std::uint32_t>(*std::max_element(line_sizes.begin(), line_sizes.end()));
  validate_usage(opts);

  const bench_file file = prepare_file(args, host && opts.direct != direct_io::on);
  std::shared_ptr<controller> ctrl = make_controller(file.path, opts);
  const bool direct_used = host && ctrl->file().direct();
  counter wrong;
  gpu_timer timer;

  for (const std::uint64_t line_size : line_sizes) {
    options o = opts;
    o.line_size = static_cast<std::uint32_t>(line_size);
    auto c = std::make_shared<cache>(o);
    const std::string base =
        "array." + std::string(host ? (direct_used ? "host.direct" : "host.pagecache") : "memory");

    if (hot) {
      array<std::uint32_t> a(c, ctrl, 0, 0, o);
      // Whole lines, at most half the cache.
      const std::uint64_t per_line = line_size / 4;
      const std::uint64_t elems = std::min<std::uint64_t>(a.size(), c->bytes() / 2 / 4) / per_line * per_line;
      const auto passes = static_cast<std::uint32_t>(args.count("hot-passes"));
      std::optional<double> ceiling;
      std::string ceiling_name;
      double ceiling_16b = 0;
      if (!args.flag("no-ceiling")) {
        const hbm_result h = hbm_read(elems * 4, 5, file.seed);
        if (h.mismatches != 0) throw runtime_error("GPU-memory read ceiling read wrong data");
        ceiling = h.gbps_4b;
        ceiling_16b = h.gbps_16b;
        ceiling_name = "plain kernel, coalesced 4-byte loads of " + format_size(elems * 4) +
                       " of GPU memory";
      }
      counter expect;
      hot_expected_kernel<<<1024, 256>>>(elems, passes, file.seed, expect.p.get());
      check_launch("hot_expected_kernel");
      const unsigned long long expected_sum = expect.value();
      // Two ways to read the hot region: x[i] for every element, and a
      // pinned line per warp (the accessor made for reuse).
      auto measure = [&](auto kernel, const char* kernel_name, const std::string& name) {
        const unsigned grid = resident_blocks(kernel, static_cast<int>(block_threads));
        counter sum;
        kernel<<<grid, static_cast<unsigned>(block_threads)>>>(a.ref(), elems, 1, sum.p.get());
        check_launch(kernel_name);  // warm-up: brings the region in
        a.check();
        sum.reset();
        const cache_stats before = a.stats();
        timer.start();
        kernel<<<grid, static_cast<unsigned>(block_threads)>>>(a.ref(), elems, passes, sum.p.get());
        timer.stop();
        check_launch(kernel_name);
        const double secs = timer.seconds();
        a.check();
        const cache_stats d = a.stats() - before;
        const std::uint64_t bad = sum.value() != expected_sum ? 1 : 0;
        json::object params = json::object_builder()
                                  .add("kernel", kernel_name)
                                  .add("line_size", line_size)
                                  .add("cache_bytes", static_cast<unsigned long long>(c->bytes()))
                                  .add("region_bytes", elems * 4)
                                  .add("passes", passes)
                                  .add("blocks", grid)
                                  .add("block_threads", block_threads)
                                  .add("misses_while_timed", static_cast<unsigned long long>(d.misses))
                                  .add("ceiling_16b_gbps", ceiling_16b)
                                  .add("seconds", secs)
                                  .done();
        out.results.push_back(result{name, gb_per_s(static_cast<double>(elems) * 4 * passes, secs), "GB/s",
                                     ceiling, ceiling_name, true, bad, std::move(params)});
      };
      const std::string name = args.str("name").empty()
                                   ? "array.hot.coalesced4b" + (sweep ? ".line" + size_tag(line_size) : "")
                                   : args.str("name");
      measure(hot_pinned_kernel, "hot_pinned_kernel", name);
      measure(hot_warp_line_kernel, "hot_warp_line_kernel", name + ".warpline");
      measure(hot_kernel, "hot_kernel", name + ".operator");
      continue;
    }

    array<std::uint64_t> a(c, ctrl, 0, 0, o);
    const std::uint64_t lines = (a.size() * 8) / line_size;
    const std::uint64_t max_threads = *std::max_element(thread_counts.begin(), thread_counts.end());
    const bench_trace tr(args, lines, max_threads * rounds);
    std::optional<ceiling_figure> ceiling;
    for (const std::uint64_t threads : thread_counts) {
      c->clear();
      c->reset_stats();
      wrong.reset();
      const auto grid = static_cast<unsigned>((threads + block_threads - 1) / block_threads);
      timer.start();
      cold_kernel<<<grid, static_cast<unsigned>(block_threads)>>>(a.ref(), tr.device(), threads, rounds,
                                                                 file.seed, wrong.p.get());
      timer.stop();
      check_launch("cold_kernel");
      const double secs = timer.seconds();
      a.check();
      const cache_stats s = a.stats();
      const std::uint64_t reads = threads * rounds;

      // The ceiling, once per line size, over the same trace and request count.
      if (!args.flag("no-ceiling") && !ceiling) {
        if (host) {
          // Let the idle service threads fall back to napping first.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ceiling = uring_ceiling(file, o, direct_used, tr, reads, static_cast<std::uint32_t>(line_size));
        } else {
          ceiling = pinned_ceiling(file, ctrl->device_ref().memory, tr, reads,
                                   static_cast<std::uint32_t>(line_size));
        }
      }

      json::object params = json::object_builder()
                                .add("threads", threads)
                                .add("block_threads", block_threads)
                                .add("reads", reads)
                                .add("line_size", line_size)
                                .add("cache_bytes", static_cast<unsigned long long>(c->bytes()))
                                .add("file_bytes", file.bytes)
                                .add("misses", static_cast<unsigned long long>(s.misses))
                                .add("hits", static_cast<unsigned long long>(s.hits))
                                .add("retries", static_cast<unsigned long long>(s.retries))
                                .add("reads_per_s", per_s(static_cast<double>(reads), secs))
                                .add("seconds", secs)
                                .done();
      tr.add_params(params);
      add_controller_params(params, o, *ctrl);
      if (ceiling)
        for (const auto& kv : ceiling->params) params.push_back(kv);
      std::string name = args.str("name");
      if (name.empty()) {
        name = base + "." + tr.pattern() + size_tag(line_size) + ".cold";
        if (thread_counts.size() > 1) name += ".threads" + size_tag(threads);
      }
      const double gbps = gb_per_s(static_cast<double>(s.bytes_read), secs);
      const double lps = per_s(static_cast<double>(s.misses), secs);
      const bool per_line = args.choice("figure", {"gbps", "lines"}) == "lines";
      const std::string ceiling_name = ceiling ? ceiling->name : std::string();
      out.results.push_back(result{per_line ? name + ".gbps" : name, gbps, "GB/s",
                                   ceiling ? std::optional<double>(ceiling->gbps) : std::nullopt,
                                   ceiling_name, true, wrong.value(), params});
      out.results.push_back(result{per_line ? name : name + ".lines", lps, "lines/s",
                                   ceiling ? std::optional<double>(ceiling->per_s) : std::nullopt,
                                   ceiling_name, true, wrong.value(), std::move(params)});
    }
  }
  std::ostringstream note;
  note << "array: controller " << ctrl->name();
  if (host)
    note << " (" << ctrl->device_ref().queues.count << " queue pairs x " << opts.queue_depth << ", "
         << opts.service_threads << " service threads, " << (direct_used ? "O_DIRECT" : "buffered")
         << ", delivery " << to_string(opts.deliver) << ")";
  out.notes.push_back(note.str());
}

}  // namespace warpstore::bench
