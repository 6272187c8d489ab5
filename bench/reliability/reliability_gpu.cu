// warpstore-reliability-gpu: the reliability study on the GPU. The fault
// kinds and hostile inputs of the CPU study, read by kernels; then the soak
// (100 GB+ through a cache under 1/32 of the data, every byte checked, both
// controllers, 4 KiB and 64 KiB lines) and the cache-pressure runs (every
// slot pinned and more lines wanted, a hot spot, a Zipf stream, 1 M+
// threads), each bounded by a wall-clock watchdog so a hang is reported, not
// waited out.
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <thread>

#include "bench/reliability/reliability.h"
#include "bench/reliability/soak_rw.h"
#include "support/gpu.cuh"
#include "support/pattern.cuh"
#include "support/pattern_file.h"
#include "support/zipf.h"
#include "warpstore/detail/hash.cuh"

namespace warpstore::reliability {
namespace {

using bench::json::object_builder;

// Device memory for a few words, freed on scope exit.
template <class T>
struct device_buffer {
  T* p = nullptr;
  explicit device_buffer(std::size_t n) {
    WARPSTORE_CUDA_TRY(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)));
    WARPSTORE_CUDA_TRY(cudaMemset(p, 0, std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

// Waits for the kernels queued so far, at most `bound_s` seconds. False is a
// hang: the caller reports it and stops using the GPU.
bool finished_within(double bound_s) {
  cudaEvent_t done;
  WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  WARPSTORE_CUDA_TRY(cudaEventRecord(done));
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
  cudaError_t st;
  while ((st = cudaEventQuery(done)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaEventDestroy(done);
  WARPSTORE_CUDA_TRY(st);
  return true;
}

void must_finish(double bound_s, const char* what) {
  if (!finished_within(bound_s)) {
    std::fprintf(stderr, "HANG: %s did not finish within %.0f s; stopping (hangs=1)\n", what,
                 bound_s);
    std::fflush(nullptr);
    std::_Exit(4);  // the GPU is stuck: nothing after this could run
  }
}

__global__ void gather_kernel(array_ref<std::uint64_t> a, const std::uint64_t* idx,
                              std::uint64_t* out, std::uint64_t n) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (t < n) out[t] = a[idx[t]];
}

void read_on_gpu(const array<std::uint64_t>& a, const std::vector<std::uint64_t>& indices,
                 std::vector<std::uint64_t>& out) {
  const std::size_t n = indices.size();
  device_buffer<std::uint64_t> idx(n), got(n);
  WARPSTORE_CUDA_TRY(cudaMemcpy(idx.p, indices.data(), n * 8, cudaMemcpyHostToDevice));
  gather_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(a.ref(), idx.p, got.p, n);
  WARPSTORE_CHECK_LAUNCH();
  must_finish(600, "gather kernel");
  WARPSTORE_CUDA_TRY(cudaMemcpy(out.data(), got.p, n * 8, cudaMemcpyDeviceToHost));
}

__global__ void scatter_kernel(array_ref<std::uint64_t> a, const std::uint64_t* idx,
                               const std::uint64_t* values, std::uint64_t n) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (t < n) a.store(idx[t], values[t]);
}

__global__ void span_kernel(array_ref<std::uint64_t> a, std::uint64_t first,
                            const std::uint64_t* values, std::uint64_t n) {
  a.write_span(first, n, values);  // one warp
}

void write_on_gpu(const array<std::uint64_t>& a, const std::vector<std::uint64_t>& indices,
                  const std::vector<std::uint64_t>& values, bool span) {
  const std::size_t n = values.size();
  device_buffer<std::uint64_t> idx(indices.size()), v(n);
  WARPSTORE_CUDA_TRY(cudaMemcpy(idx.p, indices.data(), indices.size() * 8, cudaMemcpyHostToDevice));
  WARPSTORE_CUDA_TRY(cudaMemcpy(v.p, values.data(), n * 8, cudaMemcpyHostToDevice));
  if (span)
    span_kernel<<<1, 32>>>(a.ref(), indices.at(0), v.p, n);
  else
    scatter_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(a.ref(), idx.p, v.p, n);
  WARPSTORE_CHECK_LAUNCH();
  must_finish(600, span ? "span write kernel" : "scatter kernel");
}

// The read/write soak's writers: one per warp.
__global__ void rw_kernel(rw_round r) {
  const std::uint64_t warp = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  if (warp < r.writers) rw_writer(r, warp);
}

__global__ void rw_flush_kernel(array_ref<std::uint64_t> a, int* ok) {
  const bool done = a.flush();
  if (threadIdx.x == 0) *ok = done ? 1 : 0;
}

rw_launcher gpu_rw_launcher() {
  rw_launcher l;
  l.lanes = 32;
  l.round = [](const rw_round& r, double bound_s) {
    const std::uint64_t threads = r.writers * 32;
    rw_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(r);
    WARPSTORE_CHECK_LAUNCH();
    must_finish(bound_s, "read/write soak kernel");
  };
  l.device_flush = [](const array_ref<std::uint64_t>& a, double bound_s) {
    device_buffer<int> ok(1);
    rw_flush_kernel<<<1, 32>>>(a, ok.p);
    WARPSTORE_CHECK_LAUNCH();
    must_finish(bound_s, "device flush kernel");
    int v = 0;
    WARPSTORE_CUDA_TRY(cudaMemcpy(&v, ok.p, sizeof v, cudaMemcpyDeviceToHost));
    return v == 1;
  };
  return l;
}

__device__ std::uint64_t mix(std::uint64_t x) { return warpstore::detail::murmur3_fmix64(x); }

// Soak: each warp pins `lines_per_warp` random lines in turn and checks every
// word of each; bytes checked and wrong words are summed.
__global__ void soak_kernel(array_ref<std::uint64_t> a, std::uint64_t lines_per_warp,
                            std::uint64_t seed, unsigned long long* wrong,
                            unsigned long long* checked, unsigned long long* failed) {
  const std::uint64_t warp = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  const std::uint64_t per_line = 1ull << a.elems_per_line_log2;
  const std::uint64_t lines = (a.size() + per_line - 1) / per_line;
  unsigned long long bad = 0, ok = 0, fails = 0;
  for (std::uint64_t k = 0; k < lines_per_warp; ++k) {
    const std::uint64_t line = mix(seed ^ (warp * 0x9E3779B97F4A7C15ull + k)) % lines;
    pinned_line<std::uint64_t> p = a.pin(line * per_line);
    if (!p.valid()) {
      fails += lane == 0;
      continue;
    }
    for (std::uint64_t i = p.first + lane; i < p.first + p.count; i += 32)
      bad += p[i] != tools::pattern_word(i * 8);
    ok += lane == 0 ? p.count * 8ull : 0;
    p.release_together(0xFFFFFFFFu);
  }
  if (bad) atomicAdd(wrong, bad);
  if (ok) atomicAdd(checked, ok);
  if (fails) atomicAdd(failed, fails);
}

// Every lane pins a line of its own and holds it while it reads: with more
// lanes than the cache has lines, some must wait for others' pins.
__global__ void pin_everything_kernel(array_ref<std::uint64_t> a, unsigned long long* wrong,
                                      unsigned long long* refused) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  const std::uint64_t per_line = 1ull << a.elems_per_line_log2;
  const std::uint64_t lines = a.size() / per_line;
  const std::uint64_t i = (t % lines) * per_line + t % per_line;
  pinned_line<std::uint64_t> p = a.pin(i);
  if (!p.valid()) {
    atomicAdd(refused, 1ull);
    return;
  }
  unsigned long long bad = 0;
  for (std::uint64_t j = p.first; j < p.first + p.count; j += 61)
    bad += p[j] != tools::pattern_word(j * 8);
  p.release();
  if (bad) atomicAdd(wrong, bad);
}

// Each thread reads idx[t] (or, with idx null, element t mod `modulo`).
__global__ void stream_kernel(array_ref<std::uint64_t> a, const std::uint64_t* idx,
                              std::uint64_t n, std::uint64_t modulo, unsigned long long* wrong,
                              unsigned long long* zero) {
  const std::uint64_t t = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (t >= n) return;
  const std::uint64_t i = idx ? idx[t] : t % modulo;
  const std::uint64_t v = a[i];
  if (v == 0) atomicAdd(zero, 1ull);
  else if (v != tools::pattern_word(i * 8)) atomicAdd(wrong, 1ull);
}

unsigned long long read_counter(const unsigned long long* p) {
  unsigned long long v = 0;
  WARPSTORE_CUDA_TRY(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

options gpu_options(controller_kind kind, std::uint32_t line, std::size_t cache_bytes) {
  options o;
  o.controller = kind;
  o.line_size = line;
  o.cache_bytes = cache_bytes;
  o.ways = 16;
  o.service_threads = 8;
  o.direct = direct_io::off;
  o.timeout_ns = 20'000'000'000ull;
  return o;
}

// What array::check() said, or "" (and the error count).
std::string take_error(const array<std::uint64_t>& a, std::uint64_t& errors) {
  try {
    a.check();
  } catch (const io_error& e) {
    errors = e.count();
    return e.what();
  } catch (const std::exception& e) {
    errors = 1;
    return e.what();
  }
  errors = 0;
  return {};
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A kernel run over `a`: its seconds from launch to finish (past `bound_s`
// the process stops as a hang), and what array::check() said after it.
struct kernel_run {
  double seconds = 0;
  std::uint64_t errors = 0;
  std::string error;
};
template <class Launch>
kernel_run run_kernel(const array<std::uint64_t>& a, double bound_s, const char* what,
                      Launch&& launch) {
  const auto t0 = std::chrono::steady_clock::now();
  launch();
  WARPSTORE_CHECK_LAUNCH();
  must_finish(bound_s, what);
  kernel_run k;
  k.seconds = since(t0);
  k.error = take_error(a, k.errors);
  return k;
}

// The soak: every (controller, line size) part reads its share of the bytes.
bench::result soak(const bench::parsed_args& args, const std::string& path) {
  const std::uint64_t total = args.size("soak-bytes");
  const std::uint64_t file_bytes = std::filesystem::file_size(path);
  const std::size_t cache = args.size("soak-cache");
  struct part {
    controller_kind kind;
    std::uint32_t line;
    double share;
  };
  const part parts[] = {{controller_kind::memory, 4096, 0.25},
                        {controller_kind::memory, 65536, 0.45},
                        {controller_kind::host, 4096, 0.10},
                        {controller_kind::host, 65536, 0.20}};
  std::uint64_t checked_all = 0, wrong_all = 0, failed_all = 0, errors_all = 0;
  double seconds_all = 0;
  bench::json::array runs;
  for (const part& pt : parts) {
    const std::uint64_t want = static_cast<std::uint64_t>(pt.share * static_cast<double>(total));
    if (want == 0) continue;
    array<std::uint64_t> a(path, 0, gpu_options(pt.kind, pt.line, cache));
    // 1 M threads, but no more warps than half the cache's lines: each warp
    // holds one line pinned while it checks it.
    const std::uint64_t warps = std::min<std::uint64_t>(1u << 15, cache / pt.line / 2);
    const unsigned threads = static_cast<unsigned>(warps * 32);
    const std::uint64_t lines_per_warp = std::max<std::uint64_t>(1, want / pt.line / warps);
    device_buffer<unsigned long long> wrong(1), checked(1), failed(1);
    const kernel_run k = run_kernel(a, 300, "soak kernel", [&] {
      soak_kernel<<<threads / 256, 256>>>(a.ref(), lines_per_warp, 0x5eed + pt.line, wrong.p,
                                          checked.p, failed.p);
    });
    const double s = k.seconds;
    const std::string& err = k.error;
    const auto c = read_counter(checked.p), w = read_counter(wrong.p), f = read_counter(failed.p);
    std::printf("soak %-6s line %6u: %.1f GB checked in %.2f s (%.1f GB/s), %llu wrong words, "
                "%llu failed pins %s\n",
                to_string(pt.kind), pt.line, c * 1e-9, s, c * 1e-9 / s, w, f, err.c_str());
    checked_all += c;
    wrong_all += w;
    failed_all += f;
    errors_all += k.errors;
    seconds_all += s;
    runs.push_back(object_builder()
                       .add("controller", to_string(pt.kind))
                       .add("line_size", pt.line)
                       .add("bytes", c)
                       .add("seconds", bench::round_significant(s, 3))
                       .add("wrong_words", w)
                       .add("failed_pins", f)
                       .add("error", err)
                       .done());
  }
  bench::result r;
  r.name = "soak.read";
  r.value = static_cast<double>(checked_all);
  r.unit = "bytes";
  r.verified = true;
  r.mismatches = wrong_all * 8;  // wrong bytes, counted per wrong 8-byte word
  r.params = object_builder()
                 .add("file_bytes", file_bytes)
                 .add("cache_bytes", cache)
                 .add("cache_fraction", static_cast<double>(cache) / static_cast<double>(file_bytes))
                 .add("warps_max", 1u << 15)
                 .add("failed_pins", failed_all)
                 .add("errors", errors_all)
                 .add("seconds", bench::round_significant(seconds_all, 3))
                 .add("hangs", 0)
                 .add("runs", std::move(runs))
                 .done();
  return r;
}

bench::result pressure_entry(const std::string& name, std::uint64_t reads, double seconds,
                             std::uint64_t wrong, bench::json::object params) {
  bench::result r;
  r.name = "pressure." + name;
  r.value = static_cast<double>(reads);
  r.unit = "reads";
  r.verified = true;
  r.mismatches = wrong;
  params.push_back({"seconds", bench::round_significant(seconds, 3)});
  params.push_back({"hangs", 0});
  r.params = std::move(params);
  return r;
}

// One stream_kernel run (idx, or element t mod `modulo`), as a pressure entry.
bench::result stream(const array<std::uint64_t>& a, const std::string& what, controller_kind kind,
                     const std::uint64_t* idx, unsigned threads, std::uint64_t modulo,
                     bench::json::object params) {
  device_buffer<unsigned long long> wrong(1), zero(1);
  const kernel_run k = run_kernel(a, 120, "stream kernel", [&] {
    stream_kernel<<<(threads + 255) / 256, 256>>>(a.ref(), idx, threads, modulo, wrong.p, zero.p);
  });
  const double s = k.seconds;
  const std::string& err = k.error;
  const auto w = read_counter(wrong.p), z = read_counter(zero.p);
  std::printf("pressure %s %-6s: %u threads %.3f s, %llu wrong, %llu failed %s\n", what.c_str(),
              to_string(kind), threads, s, w, z, err.c_str());
  params.push_back({"failed_reads", z});
  params.push_back({"error", err});
  return pressure_entry(what + "." + to_string(kind), threads, s, w + z, std::move(params));
}

std::vector<bench::result> pressure(const bench::parsed_args& args, const std::string& path) {
  std::vector<bench::result> out;
  const unsigned threads = static_cast<unsigned>(args.count("pressure-threads"));
  const unsigned blocks = (threads + 255) / 256;

  for (controller_kind kind : {controller_kind::memory, controller_kind::host}) {
    // Every slot pinned, and many more lines wanted at once than the cache
    // holds: 64 lines of cache, `threads` lanes each pinning its own line.
    options o = gpu_options(kind, 4096, 64 * 4096);
    o.ways = 4;
    // A lane waits for a pin until its set has not changed for this long;
    // while other lanes pin and let go there, up to 16 times as long
    // (detail::deadline::max_extension). The launch runs in waves of
    // resident warps (four of them at 1 M threads on an H100), each of which
    // may wait that long: 0.5 s keeps the whole run within half a minute.
    o.timeout_ns = 500'000'000ull;
    array<std::uint64_t> a(path, 0, o);
    device_buffer<unsigned long long> wrong(1), refused(1);
    const kernel_run k = run_kernel(a, 240, "pin-everything kernel", [&] {
      pin_everything_kernel<<<blocks, 256>>>(a.ref(), wrong.p, refused.p);
    });
    const double s = k.seconds;
    const std::uint64_t errors = k.errors;
    const std::string& err = k.error;
    const auto w = read_counter(wrong.p), ref = read_counter(refused.p);
    std::printf("pressure pinned %-6s: %u lanes, 64 lines: %.2f s, %llu refused (%s), %llu wrong\n",
                to_string(kind), threads, s, ref, err.c_str(), w);
    out.push_back(pressure_entry(
        std::string("pinned_oversubscribed.") + to_string(kind), threads, s, w,
        object_builder()
            .add("threads", threads)
            .add("cache_lines", 64)
            .add("timeout_s", static_cast<double>(o.timeout_ns) / 1e9)
            .add("refused_pins", ref)
            .add("errors_reported", errors)
            .add("error", err)
            .add("clear_error", ref == 0 || (errors > 0 && !err.empty()))
            .done()));
  }

  for (controller_kind kind : {controller_kind::memory, controller_kind::host}) {
    array<std::uint64_t> a(path, 0, gpu_options(kind, 4096, 64 << 20));
    // Hot spot: every thread wants one of 8 elements of line 0.
    out.push_back(stream(a, "hotspot", kind, nullptr, threads, 8,
                         object_builder().add("threads", threads).done()));
    // A Zipf stream (exponent 0.99) over the whole file.
    const std::vector<std::uint64_t> idx = bench::zipf_generator(a.size(), 0.99, 17).indices(threads);
    device_buffer<std::uint64_t> d_idx(threads);
    WARPSTORE_CUDA_TRY(cudaMemcpy(d_idx.p, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
    out.push_back(stream(a, "zipf", kind, d_idx.p, threads, 0,
                         object_builder().add("threads", threads).add("exponent", 0.99).done()));
  }
  return out;
}

// A pattern file that removes itself.
struct scratch {
  std::string name;
  scratch(std::string path, std::uint64_t bytes, unsigned writers) : name(std::move(path)) {
    std::printf("writing %llu bytes to %s\n", static_cast<unsigned long long>(bytes), name.c_str());
    tools::write_pattern_file(name, bytes, 0, writers, {}, false);
  }
  ~scratch() {
    std::error_code ec;
    std::filesystem::remove(name, ec);
  }
};

std::vector<bench::result> gpu_parts(const bench::parsed_args& args) {
  std::vector<bench::result> out;
  const unsigned writers = std::max(1u, std::thread::hardware_concurrency());
  if (args.count("pressure-threads") > 0) {
    const scratch path(args.str("dir") + "/warpstore-reliability-pressure.bin", 256 << 20, writers);
    auto p = pressure(args, path.name);
    out.insert(out.end(), p.begin(), p.end());
  }
  if (args.size("soak-bytes") > 0) {
    const scratch path(args.str("dir") + "/warpstore-reliability-soak.bin", args.size("soak-file"),
                       writers);
    out.push_back(soak(args, path.name));
  }
  rw_setup s = rw_setup_from(args, "gpu");
  if (s.file_bytes > 0) {
    s.ways = 16;
    s.service_threads = 8;
    s.span_max = 8192;
    const scratch path(s.path, s.file_bytes, writers);
    out.push_back(run_soak_readwrite(s, default_rw_parts(), gpu_rw_launcher()));
  }
  return out;
}

}  // namespace
}  // namespace warpstore::reliability

int main(int argc, char** argv) {
  using namespace warpstore::reliability;
  return study_main(argc, argv, "warpstore-reliability-gpu", [] {
    target t;
    t.name = "gpu";
    t.device = warpstore::runtime::device_name();
    t.read = read_on_gpu;
    t.write = write_on_gpu;
    t.gpu = true;
    t.extra = gpu_parts;
    t.extra_options = [](warpstore::bench::command_spec& c) {
      c.option("soak-bytes", "BYTES", "100G", "bytes the soak verifies (0: no soak)")
          .option("soak-file", "BYTES", "8G", "file the soak reads")
          .option("soak-cache", "BYTES", "128M", "cache of the soak (under 1/32 of the file)")
          .option("pressure-threads", "N", "1M", "threads of the pressure runs (0: none)");
      // 2 GiB through 32 MiB (1/64); 4 K warps (128 K threads) write.
      declare_rw_options(c, "2G", "32M", "4K", "32", "6");
    };
    return t;
  });
}
