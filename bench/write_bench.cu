// Write-heavy vector add, C = A + B over arrays each larger than the cache,
// against what users do without warpstore: a CPU-orchestrated tiled loop that
// overlaps pread, copies to and from the GPU, the add kernel and pwrite,
// double-buffered. Same files, same durability (fdatasync at the end), and
// the output file is checked word by word after each run.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/subcommands.h"
#include "support/setting_options.h"
#include "support/gpu.cuh"
#include "support/pattern_file.h"
#include "support/timing.h"
#include "warpstore/array.cuh"

namespace warpstore::bench {

namespace {

constexpr int add_block_threads = 128;  // 4 warps, 8 KiB of shared memory each
constexpr std::uint32_t span_elems = 512;

// One warp per 512-element span: read A and B with read_span, add, write C
// with write_span (whole lines: claimed without reading).
__global__ void vector_add_kernel(array_ref<std::uint64_t> a, array_ref<std::uint64_t> b,
                                  array_ref<std::uint64_t> c) {
  __shared__ std::uint64_t buf[add_block_threads / 32][2][span_elems];
  const unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::uint64_t warp_id = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x / 32;
  for (std::uint64_t first = warp_id * span_elems; first < c.size(); first += warps * span_elems) {
    const std::uint64_t n = std::min<std::uint64_t>(span_elems, c.size() - first);
    a.read_span(first, n, buf[w][0]);
    b.read_span(first, n, buf[w][1]);
    __syncwarp();
    for (std::uint64_t k = lane; k < n; k += 32) buf[w][0][k] += buf[w][1][k];
    __syncwarp();
    c.write_span(first, n, buf[w][0]);
    __syncwarp();
  }
}

__global__ void tile_add_kernel(const std::uint64_t* a, const std::uint64_t* b, std::uint64_t* c,
                                std::uint64_t n) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += stride)
    c[i] = a[i] + b[i];
}

std::uint64_t expected(std::uint64_t i, std::uint64_t n, std::uint64_t seed) {
  return tools::pattern_word(i * 8, seed) + tools::pattern_word((n + i) * 8, seed);
}

// An output file of exactly `bytes` bytes, all zero (so a run that writes
// nothing cannot pass the check): a fresh sparse file, or with `overwrite`
// zeros written into allocated blocks and made durable, so the run
// overwrites them (no block allocation while it writes).
void reset_output(const std::string& path, std::uint64_t bytes, bool overwrite, unsigned threads) {
  tools::detail::fd_guard fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw std::runtime_error("cannot create " + path);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    throw std::runtime_error("cannot size " + path);
  if (!overwrite) return;
  const std::vector<unsigned char> zeros(tools::detail::chunk_bytes, 0);
  tools::detail::parallel_chunks(
      bytes, tools::detail::chunk_bytes, threads, {}, [&](std::uint64_t off, std::uint64_t len) {
        tools::detail::pwrite_all(fd.get(), zeros.data(), len, off, path);
      });
  if (::fdatasync(fd.get()) != 0) throw std::runtime_error("fdatasync of " + path + " failed");
}

// Words of the output that are not A + B.
std::uint64_t check_output(const std::string& path, std::uint64_t n, std::uint64_t seed,
                           unsigned threads) {
  tools::detail::fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw std::runtime_error("cannot open " + path);
  std::atomic<std::uint64_t> bad{0};
  tools::detail::parallel_chunks(
      n * 8, tools::detail::chunk_bytes, threads, {}, [&](std::uint64_t off, std::uint64_t len) {
        thread_local std::vector<std::uint64_t> buf;
        buf.resize(tools::detail::chunk_bytes / 8);
        if (tools::detail::pread_all(fd.get(), reinterpret_cast<unsigned char*>(buf.data()), len,
                                     off, path) != len)
          throw std::runtime_error(path + " is short");
        std::uint64_t b = 0;
        for (std::uint64_t k = 0; k < len / 8; ++k) b += buf[k] != expected(off / 8 + k, n, seed);
        bad.fetch_add(b);
      });
  return bad.load();
}

void fdatasync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 || ::fdatasync(fd) != 0) throw std::runtime_error("fdatasync of " + path + " failed");
  ::close(fd);
}

// Splits [off, off + len) over `threads` threads running io(part_off, part_len).
template <class Io>
void parallel_io(std::uint64_t off, std::uint64_t len, unsigned threads, Io&& io) {
  const std::uint64_t part = (len / threads + 4095) & ~std::uint64_t{4095};
  std::vector<std::thread> ts;
  for (std::uint64_t o = 0; o < len; o += part)
    ts.emplace_back([&, o] { io(off + o, std::min(part, len - o), o); });
  for (auto& t : ts) t.join();
}

struct pinned_buffer {
  std::uint64_t* p = nullptr;
  explicit pinned_buffer(std::size_t bytes) { WARPSTORE_CUDA_TRY(cudaMallocHost(&p, bytes)); }
  ~pinned_buffer() { cudaFreeHost(p); }
};
struct device_buffer {
  std::uint64_t* p = nullptr;
  explicit device_buffer(std::size_t bytes) { WARPSTORE_CUDA_TRY(cudaMalloc(&p, bytes)); }
  ~device_buffer() { cudaFree(p); }
};

// The tiled baseline: reader threads, the GPU stream and writer threads each
// work on a different tile; two of every buffer.
struct tiled_times {
  double seconds = 0;       // to durable
  double sync_seconds = 0;  // of which the final fdatasync
};

tiled_times run_tiled(const std::string& in_path, const std::string& out_path, std::uint64_t n,
                      std::uint64_t tile_elems, unsigned io_threads) {
  const std::size_t tile_bytes = tile_elems * 8;
  const int in_fd = ::open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (in_fd < 0 || out_fd < 0) throw std::runtime_error("tiled: cannot open the files");
  std::vector<std::unique_ptr<pinned_buffer>> ha, hb, hc;
  std::vector<std::unique_ptr<device_buffer>> da, db, dc;
  cudaEvent_t copied_in[2], done[2];
  for (int s = 0; s < 2; ++s) {
    ha.push_back(std::make_unique<pinned_buffer>(tile_bytes));
    hb.push_back(std::make_unique<pinned_buffer>(tile_bytes));
    hc.push_back(std::make_unique<pinned_buffer>(tile_bytes));
    da.push_back(std::make_unique<device_buffer>(tile_bytes));
    db.push_back(std::make_unique<device_buffer>(tile_bytes));
    dc.push_back(std::make_unique<device_buffer>(tile_bytes));
    WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&copied_in[s], cudaEventDisableTiming));
    WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&done[s], cudaEventDisableTiming));
  }
  cudaStream_t stream;
  WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::uint64_t tiles = (n + tile_elems - 1) / tile_elems;
  auto elems_of = [&](std::uint64_t t) { return std::min(tile_elems, n - t * tile_elems); };
  auto read_tile = [&](std::uint64_t t, int s) {
    const std::uint64_t bytes = elems_of(t) * 8;
    parallel_io(t * tile_bytes, bytes, io_threads,
                [&](std::uint64_t off, std::uint64_t len, std::uint64_t at) {
                  auto* pa = reinterpret_cast<unsigned char*>(ha[s]->p) + at;
                  auto* pb = reinterpret_cast<unsigned char*>(hb[s]->p) + at;
                  if (tools::detail::pread_all(in_fd, pa, len, off, in_path) != len ||
                      tools::detail::pread_all(in_fd, pb, len, n * 8 + off, in_path) != len)
                    throw std::runtime_error("tiled: short read");
                });
  };
  auto write_tile = [&](std::uint64_t t, int s) {
    WARPSTORE_CUDA_TRY(cudaEventSynchronize(done[s]));
    parallel_io(t * tile_bytes, elems_of(t) * 8, io_threads,
                [&](std::uint64_t off, std::uint64_t len, std::uint64_t at) {
                  tools::detail::pwrite_all(out_fd, reinterpret_cast<unsigned char*>(hc[s]->p) + at,
                                            len, off, out_path);
                });
  };
  stopwatch clock;
  std::future<void> reading = std::async(std::launch::async, read_tile, 0, 0);
  std::future<void> writing[2];
  for (std::uint64_t t = 0; t < tiles; ++t) {
    const int s = static_cast<int>(t % 2);
    reading.get();
    if (t + 1 < tiles) {
      // The other slot's inputs are free once the GPU copied them in.
      WARPSTORE_CUDA_TRY(cudaEventSynchronize(copied_in[1 - s]));
      reading = std::async(std::launch::async, read_tile, t + 1, 1 - s);
    }
    if (writing[s].valid()) writing[s].get();  // this slot's output went to the file
    const std::size_t bytes = elems_of(t) * 8;
    WARPSTORE_CUDA_TRY(cudaMemcpyAsync(da[s]->p, ha[s]->p, bytes, cudaMemcpyHostToDevice, stream));
    WARPSTORE_CUDA_TRY(cudaMemcpyAsync(db[s]->p, hb[s]->p, bytes, cudaMemcpyHostToDevice, stream));
    WARPSTORE_CUDA_TRY(cudaEventRecord(copied_in[s], stream));
    tile_add_kernel<<<1024, 256, 0, stream>>>(da[s]->p, db[s]->p, dc[s]->p, elems_of(t));
    check_launched("tile_add_kernel");
    WARPSTORE_CUDA_TRY(cudaMemcpyAsync(hc[s]->p, dc[s]->p, bytes, cudaMemcpyDeviceToHost, stream));
    WARPSTORE_CUDA_TRY(cudaEventRecord(done[s], stream));
    writing[s] = std::async(std::launch::async, write_tile, t, s);
  }
  for (auto& w : writing)
    if (w.valid()) w.get();
  const double before_sync = clock.seconds();
  if (::fdatasync(out_fd) != 0) throw std::runtime_error("tiled: fdatasync failed");
  const double secs = clock.seconds();
  WARPSTORE_CUDA_TRY(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  for (int s = 0; s < 2; ++s) {
    cudaEventDestroy(copied_in[s]);
    cudaEventDestroy(done[s]);
  }
  ::close(in_fd);
  ::close(out_fd);
  return {secs, secs - before_sync};
}

}  // namespace

void declare_writes(command_spec& cmd) {
  declare_file_options(cmd);
  declare_controller_options(cmd);
  declare_options(cmd, {{"cache_bytes", "1GiB", "cache size (smaller than each array)"},
                        {"line_size", "4K"}});
  cmd.option("elements", "N", "256M", "elements (8 bytes) of each of A, B and C")
      .option("tile", "BYTES", "64MiB", "tiled baseline: bytes of each array per tile")
      .option("io-threads", "N", "8", "tiled baseline: pread/pwrite threads per tile")
      .option("repeat", "N", "3", "alternating trials of each side; the medians are reported")
      .option("output", "PATH", "", "output file [default: the data file + .out]")
      .flag("overwrite",
            "before each trial, write the output whole with zeros and sync it, so both sides "
            "overwrite allocated blocks [default: a fresh sparse output]")
      .option("output-direct", "off|auto|on", "",
              "O_DIRECT for C's host controller [default: as --direct]")
      .option("name", "NAME", "write.vectoradd.vs_tiled", "result name");
}

// One warpstore run of the vector add, timed until C is durable.
struct warpstore_trial {
  double seconds = 0, kernel_seconds = 0, sync_seconds = 0;
  cache_stats cache;
  controller_stats writes, writes_at_kernel_end;
  std::string controller;
  bool output_direct = false;
};

warpstore_trial run_warpstore(const std::string& in_path, const std::string& out_path,
                              std::uint64_t n, const options& opts, direct_io output_direct) {
  warpstore_trial t;
  auto c = std::make_shared<cache>(opts);
  auto in_ctl = make_controller(in_path, opts);
  options wopts = opts;
  wopts.writable = true;
  wopts.direct = output_direct;
  auto out_ctl = make_controller(out_path, wopts);
  t.controller = out_ctl->name();
  t.output_direct = out_ctl->file().direct();
  array<std::uint64_t> a(c, in_ctl, n, 0, opts);
  array<std::uint64_t> b(c, in_ctl, n, n * 8, opts);
  array<std::uint64_t> cc(c, out_ctl, n, 0, wopts);
  const unsigned blocks = resident_blocks(vector_add_kernel, add_block_threads) * 4;
  stopwatch clock;
  vector_add_kernel<<<blocks, add_block_threads>>>(a.ref(), b.ref(), cc.ref());
  check_launch("vector_add_kernel");
  t.kernel_seconds = clock.seconds();
  t.writes_at_kernel_end = out_ctl->stats();
  cc.flush();  // every line written back and fdatasync'ed (or written out, memory controller)
  t.seconds = clock.seconds();
  a.check();
  b.check();
  t.cache = c->stats();
  t.writes = out_ctl->stats();
  t.sync_seconds = static_cast<double>(t.writes.sync_ns) * 1e-9;
  return t;
}

json::array as_json(const std::vector<double>& v) {
  json::array a;
  for (double x : v) a.emplace_back(x);
  return a;
}

void run_writes(const parsed_args& args, report& out) {
  const std::uint64_t n = args.size("elements");
  const bench_file in = prepare_file(args, true);
  if (in.bytes < 2 * n * 8)
    throw usage_error("--file-size must hold A and B: at least " + std::to_string(2 * n * 8) +
                      " bytes");
  const std::string out_path = args.str("output").empty() ? in.path + ".out" : args.str("output");
  const unsigned check_threads = std::max(1u, std::thread::hardware_concurrency());
  const double bytes_moved = 3.0 * n * 8;
  const auto repeat = static_cast<unsigned>(args.integer("repeat"));
  const bool overwrite = args.flag("overwrite");
  if (repeat == 0) throw usage_error("--repeat must be at least 1");

  // warpstore: A and B read-only over the data file, C read-write over the
  // output, all three in one cache.
  options opts = controller_options(args);
  if (opts.cache_bytes >= n * 8) throw usage_error("--cache-bytes must be smaller than each array");
  const direct_io output_direct =
      args.str("output-direct").empty() ? opts.direct : parse_direct(args.str("output-direct"));
  const std::uint64_t tile_elems = args.size("tile") / 8;
  const auto io_threads = static_cast<unsigned>(args.integer("io-threads"));

  // Trials alternate, each side starting from a zeroed output and checked
  // word by word after it; the median of each side is reported.
  std::vector<warpstore_trial> ws;
  std::vector<tiled_times> tiled;
  std::vector<double> ws_secs, tiled_secs;
  std::uint64_t ws_bad = 0, tiled_bad = 0;
  for (unsigned trial = 0; trial < repeat; ++trial) {
    reset_output(out_path, n * 8, overwrite, check_threads);
    ws.push_back(run_warpstore(in.path, out_path, n, opts, output_direct));
    ws_secs.push_back(ws.back().seconds);
    ws_bad += check_output(out_path, n, in.seed, check_threads);
    reset_output(out_path, n * 8, overwrite, check_threads);
    tiled.push_back(run_tiled(in.path, out_path, n, tile_elems, io_threads));
    tiled_secs.push_back(tiled.back().seconds);
    tiled_bad += check_output(out_path, n, in.seed, check_threads);
    fdatasync_path(out_path);
  }
  const warpstore_trial& w = ws[median_index(ws_secs)];
  const tiled_times& t = tiled[median_index(tiled_secs)];

  result r;
  r.name = args.str("name");
  r.value = gb_per_s(bytes_moved, w.seconds);
  r.unit = "GB/s";
  r.ceiling = gb_per_s(bytes_moved, t.seconds);
  r.ceiling_name =
      "CPU-orchestrated tiles: pread, H2D, add, D2H, pwrite overlapped, double-buffered, " +
      format_size(tile_elems * 8) + " tiles, then fdatasync";
  r.verified = true;
  r.mismatches = ws_bad + tiled_bad;
  const auto u64 = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  r.params = json::object_builder()
                 .add("elements", u64(n))
                 .add("array_bytes", u64(n * 8))
                 .add("cache_bytes", u64(opts.cache_bytes))
                 .add("line_size", opts.line_size)
                 .add("controller", w.controller)
                 .add("output_direct", w.output_direct)
                 .add("trials", repeat)
                 .add("statistic", "median of the trials, each side")
                 .add("warpstore_seconds", w.seconds)
                 .add("warpstore_seconds_all", as_json(ws_secs))
                 .add("kernel_seconds", w.kernel_seconds)
                 .add("fdatasync_seconds", w.sync_seconds)
                 .add("retries", u64(w.cache.retries))
                 .add("overlapped_evictions", u64(w.cache.overlapped_evictions))
                 .add("writebacks", u64(w.cache.writebacks))
                 .add("combined_writes", u64(w.writes.combined_writes))
                 .add("write_calls", u64(w.writes.write_calls))
                 .add("write_batches", u64(w.writes.write_batches))
                 .add("kernel_writes", u64(w.writes_at_kernel_end.combined_writes))
                 .add("kernel_write_calls", u64(w.writes_at_kernel_end.write_calls))
                 .add("write_behind_bytes", u64(opts.write_behind_bytes))
                 .add("eager_write_back", opts.eager_write_back)
                 .add("write_behind_starts", u64(w.writes.write_behind_starts))
                 .add("kernel_write_thread_seconds",
                      static_cast<double>(w.writes_at_kernel_end.write_ns) * 1e-9)
                 .add("tiled_seconds", t.seconds)
                 .add("tiled_seconds_all", as_json(tiled_secs))
                 .add("tiled_fdatasync_seconds", t.sync_seconds)
                 .add("tile_bytes", u64(tile_elems * 8))
                 .add("output", overwrite ? "overwritten" : "fresh")
                 .add("warpstore_mismatches", u64(ws_bad))
                 .add("tiled_mismatches", u64(tiled_bad))
                 .done();
  out.results.push_back(r);
  std::ostringstream note;
  note << "C = A + B, " << format_size(n * 8) << " each, cache " << format_size(opts.cache_bytes)
       << "; GB/s counts A, B and C once (3 x " << format_size(n * 8)
       << "), timed to durable (fdatasync) for both; median of " << repeat
       << " alternating trials each. warpstore " << w.seconds << " s (kernel " << w.kernel_seconds
       << " s, fdatasync " << w.sync_seconds << " s; " << w.writes.combined_writes
       << " buffered WRITEs in " << w.writes.write_calls << " pwritev calls, "
       << w.writes_at_kernel_end.combined_writes << " WRITEs in "
       << w.writes_at_kernel_end.write_calls << " calls during the kernel; " << w.cache.retries
       << " cache retries, " << w.cache.writebacks << " lines written back, "
       << w.cache.overlapped_evictions << " dirty evictions overlapped with their fill), tiled "
       << t.seconds << " s (fdatasync " << t.sync_seconds << " s). All trials: warpstore";
  for (double x : ws_secs) note << ' ' << x;
  note << " s, tiled";
  for (double x : tiled_secs) note << ' ' << x;
  note << " s.";
  out.notes.push_back(note.str());
}

}  // namespace warpstore::bench
