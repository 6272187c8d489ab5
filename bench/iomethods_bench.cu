// warpstore-bench iomethods: the I/O-methods comparison, a GPU fio. For the
// same file and the same seeded trace (random 4 KiB and sequential 128 KiB
// requests), every way of getting file bytes into GPU memory reads them:
//
//   uring    raw io_uring from CPU threads into pinned host memory: the ceiling
//   pread    CPU threads pread into pinned staging + cudaMemcpyAsync, double-buffered
//   mmap     the file mapped; one cudaMemcpy per request from the mapping
//   uvm      cudaMallocManaged copy of the file, preferred location host; GPU warps fault it in
//   cufile   cuFileRead by CPU threads (dlopen'ed libcufile; compatibility
//            mode where nvidia-fs is missing, as on the GPU machine)
//   block    warpstore raw queue reads (io_ref::read, no cache), a GPU thread per request
//   array    warpstore array reads (read_span, a warp per request) through
//            the cache: cold (empty cache), then hot (same trace again)
//
// Every request lands in its own slot of a device buffer, and every slot is
// verified against the file pattern after each round with the clock stopped.
// Per request latency: %globaltimer on the GPU for GPU-initiated methods,
// clock_gettime for CPU-driven ones. CPU seconds: getrusage of the whole
// process over the timed part (service threads included). Reads only:
// warpstore writes are not built yet.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench/ceilings/kernels.cuh"
#include "bench/ceilings/uring_reader.h"
#include "bench/iomethods/cpu_methods.h"
#include "bench/iomethods/cufile.h"
#include "bench/iomethods/measure.h"
#include "bench/subcommands.h"
#include "support/setting_options.h"
#include "support/gpu.cuh"
#include "support/pattern_file.h"
#include "support/timing.h"
#include "warpstore/array.cuh"

namespace warpstore::bench {

namespace {

namespace im = iomethods;

// ---- GPU side -------------------------------------------------------------------

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float micros(std::uint64_t from, std::uint64_t to) {
  return static_cast<float>(to - from) * 1e-3f;
}

// A warp's place in the grid; blocks smaller than a warp make warps of fewer lanes.
struct warp_place {
  unsigned lane, lanes;
  std::uint64_t warp, warps;
};

__device__ warp_place place_of_warp() {
  const unsigned per_block = (blockDim.x + 31) / 32;
  const unsigned first_thread = threadIdx.x / 32 * 32;
  return {threadIdx.x % 32, min(32u, blockDim.x - first_thread),
          static_cast<std::uint64_t>(blockIdx.x) * per_block + threadIdx.x / 32,
          static_cast<std::uint64_t>(gridDim.x) * per_block};
}

// Unified memory: warp w copies requests w, w + warps, ... of the round from
// the managed copy of the file, faulting its pages in.
__global__ void uvm_kernel(const uint4* file, trace tr, std::uint64_t r0, std::uint64_t count,
                           std::uint32_t request_bytes, uint4* dst, float* latency_us) {
  const warp_place w = place_of_warp();
  const unsigned mask = __activemask();
  const std::uint32_t n16 = request_bytes / 16;
  for (std::uint64_t k = w.warp; k < count; k += w.warps) {
    const std::uint64_t t0 = global_ns();
    const uint4* src = file + tr.index(r0 + k) * n16;
    for (std::uint32_t j = w.lane; j < n16; j += w.lanes) dst[k * n16 + j] = src[j];
    __syncwarp(mask);
    if (w.lane == 0) latency_us[k] = micros(t0, global_ns());
  }
}

// warpstore array: warp w reads requests w, w + warps, ... with read_span
// (the cache's lines, filled through the controller on a miss).
__global__ void array_kernel(array_ref<uint4> a, trace tr, std::uint64_t r0, std::uint64_t count,
                             std::uint32_t request_bytes, uint4* dst, float* latency_us) {
  const warp_place w = place_of_warp();
  const std::uint32_t n16 = request_bytes / 16;
  for (std::uint64_t k = w.warp; k < count; k += w.warps) {
    const std::uint64_t t0 = global_ns();
    a.read_span(tr.index(r0 + k) * n16, n16, dst + k * n16);  // errors go to a.check()
    if (w.lane == 0) latency_us[k] = micros(t0, global_ns());
  }
}

// warpstore block: thread t reads requests t, t + threads, ... through the
// queues (no cache), each in pieces of `piece` bytes (a controller staging
// slot holds at most 64 KiB). Every lane of a warp loops the same number of
// times, as io_ref::read wants.
__global__ void block_kernel(io_ref io, trace tr, std::uint64_t r0, std::uint64_t count,
                             std::uint32_t request_bytes, std::uint32_t piece, std::byte* dst,
                             float* latency_us, error_record* errors) {
  const unsigned mask = __activemask();
  const std::uint64_t tid = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t threads = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t rounds = (count + threads - 1) / threads;
  for (std::uint64_t j = 0; j < rounds; ++j) {
    const std::uint64_t k = j * threads + tid;
    const bool live = k < count;
    const std::uint64_t t0 = global_ns();
    for (std::uint32_t p = 0; p < request_bytes; p += piece) {
      io_request req{};
      if (live) {
        req.slba = (tr.index(r0 + k) * request_bytes + p) >> nvme::block_shift;
        req.blocks = piece >> nvme::block_shift;
        req.dst = dst + k * request_bytes + p;
      }
      const nvme::status st = io.read(mask, live, req);
      if (live && !st.success())
        errors->record(st.is_deadline() ? error_kind::deadline : error_kind::io, 0, st, r0 + k,
                       req.slba);
    }
    if (live) latency_us[k] = micros(t0, global_ns());
  }
}

// ---- where the CPU-driven methods deliver: the device buffer ----------------------

// Copies between the device buffer and host memory for CPU threads: a stream
// per thread, two pinned staging buffers per thread and an event for each.
class staged_copies {
 public:
  staged_copies(std::byte* device, std::uint64_t bytes, unsigned threads, std::size_t staging_bytes)
      : device_(device),
        bytes_(bytes),
        staging_bytes_(staging_bytes),
        staging_(runtime::make_host_mapped<std::byte>(2 * staging_bytes * threads)),
        streams_(threads),
        events_(2 * std::size_t{threads}) {
    for (auto& s : streams_)
      WARPSTORE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (auto& e : events_)
      WARPSTORE_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~staged_copies() {
    for (auto& e : events_)
      if (e) cudaEventDestroy(e);
    for (auto& s : streams_)
      if (s) cudaStreamDestroy(s);
  }
  staged_copies(const staged_copies&) = delete;
  staged_copies& operator=(const staged_copies&) = delete;

  std::byte* staging(unsigned t, unsigned b) const {
    return staging_.get() + (2 * std::size_t{t} + b) * staging_bytes_;
  }
  std::size_t staging_bytes() const { return staging_bytes_; }
  // Starts copying n bytes between byte `offset` of the device buffer and `host`.
  void start(unsigned t, unsigned b, std::uint64_t offset, void* host, std::size_t n,
             bool to_device) {
    if (offset > bytes_ || n > bytes_ - offset)
      throw runtime_error("iomethods: copy of " + std::to_string(n) + " bytes at " +
                          std::to_string(offset) + " past the end of the " +
                          std::to_string(bytes_) + "-byte device buffer");
    if (to_device)
      WARPSTORE_CUDA_TRY(
          cudaMemcpyAsync(device_ + offset, host, n, cudaMemcpyHostToDevice, streams_[t]));
    else
      WARPSTORE_CUDA_TRY(
          cudaMemcpyAsync(host, device_ + offset, n, cudaMemcpyDeviceToHost, streams_[t]));
    WARPSTORE_CUDA_TRY(cudaEventRecord(events_[2 * std::size_t{t} + b], streams_[t]));
  }
  void wait(unsigned t, unsigned b) {
    WARPSTORE_CUDA_TRY(cudaEventSynchronize(events_[2 * std::size_t{t} + b]));
  }
  std::byte* device() const { return device_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::byte* device_;
  std::uint64_t bytes_;
  std::size_t staging_bytes_;
  runtime::host_mapped_ptr<std::byte> staging_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
};

class gpu_destination final : public im::destination {
 public:
  gpu_destination(std::byte* device, std::uint64_t bytes, unsigned threads,
                  std::size_t staging_bytes)
      : copies_(device, bytes, threads, staging_bytes) {
    runtime::memset_device(device, 0xFF, bytes);
  }
  std::byte* staging(unsigned t, unsigned b) override { return copies_.staging(t, b); }
  std::size_t staging_bytes() const override { return copies_.staging_bytes(); }
  void copy(unsigned t, unsigned b, std::uint64_t offset, const std::byte* src,
            std::size_t n) override {
    copies_.start(t, b, offset, const_cast<std::byte*>(src), n, true);
  }
  void wait(unsigned t, unsigned b) override { copies_.wait(t, b); }
  std::uint64_t verify(const trace& tr, std::uint64_t first, std::uint64_t count,
                       std::uint32_t request_bytes, std::uint64_t seed) override {
    WARPSTORE_CUDA_TRY(cudaDeviceSynchronize());
    const std::uint64_t bad = verify_trace(copies_.device(), request_bytes, tr, first, count, seed);
    runtime::memset_device(copies_.device(), 0xFF,
                           std::min<std::uint64_t>(copies_.bytes(), count * request_bytes));
    return bad;
  }

 private:
  staged_copies copies_;
};

// Where the CPU-driven write methods fetch from: the device buffer, slot k
// filled with the pattern of its request by a kernel before each round.
__global__ void fill_slots_kernel(std::uint64_t* dst, trace tr, std::uint64_t first,
                                  std::uint64_t count, std::uint32_t request_bytes,
                                  std::uint64_t seed) {
  const std::uint64_t words = request_bytes / 8;
  const std::uint64_t n = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t w = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       w < count * words; w += n) {
    const std::uint64_t k = w / words;
    dst[w] = tools::pattern_word(tr.index(first + k) * request_bytes + (w % words) * 8, seed);
  }
}

class gpu_source final : public im::source {
 public:
  gpu_source(std::byte* device, std::uint64_t bytes, unsigned threads, std::size_t staging_bytes)
      : copies_(device, bytes, threads, staging_bytes) {}
  std::byte* staging(unsigned t, unsigned b) override { return copies_.staging(t, b); }
  std::size_t staging_bytes() const override { return copies_.staging_bytes(); }
  void fetch(unsigned t, unsigned b, std::uint64_t offset, std::byte* dst, std::size_t n) override {
    copies_.start(t, b, offset, dst, n, false);
  }
  void wait(unsigned t, unsigned b) override { copies_.wait(t, b); }
  void fill(const trace& tr, std::uint64_t first, std::uint64_t count, std::uint32_t request_bytes,
            std::uint64_t seed) override {
    if (count * request_bytes > copies_.bytes())
      throw runtime_error("gpu_source: fill past the end");
    fill_slots_kernel<<<1024, 256>>>(reinterpret_cast<std::uint64_t*>(copies_.device()), tr, first,
                                     count, request_bytes, seed);
    check_launch("fill_slots_kernel");
  }

 private:
  staged_copies copies_;
};

// ---- one measured figure of a method ------------------------------------------------

struct figure {
  double seconds = 0;
  std::uint64_t requests = 0;
  double gbps = 0;
  double iops = 0;
  double cpu_seconds = 0;
  im::latency_summary latency;
  std::uint64_t mismatches = 0;
  std::uint64_t threads = 0;
  std::optional<std::uint64_t> block_threads;  // GPU-initiated methods
  json::object extra;
};

// A figure from a CPU-driven run (method_result or the io_uring reader's result).
template <class Run>
figure from_run(const Run& r, const im::latency_summary& latency, unsigned threads) {
  figure f;
  f.seconds = r.seconds;
  f.requests = r.requests;
  f.gbps = r.gbps;
  f.iops = r.iops;
  f.cpu_seconds = r.cpu_seconds;
  f.latency = latency;
  f.mismatches = r.mismatches;
  f.threads = threads;
  f.extra.push_back({"rounds", r.rounds});
  return f;
}

figure from_cpu(const im::method_result& r, unsigned threads) {
  return from_run(r, r.latency, threads);
}

// What a pattern of the comparison shares: file, trace, request size, the
// device buffer every method fills, and its ceiling.
struct study {
  bench_file file;
  std::string tag;  // "random4k" | "sequential128k"
  trace tr;
  std::uint32_t request = 0;
  std::uint64_t requests = 0;       // fast methods
  std::uint64_t slow_requests = 0;  // unified memory, cuFile, mmap
  std::uint64_t slots = 0;          // requests per round
  std::byte* dst = nullptr;
  float* latency = nullptr;  // device, one per slot
  unsigned cpu_threads = 8;
  std::size_t staging_bytes = 0;
  std::optional<figure> ceiling;
  std::string ceiling_name;
  std::optional<figure> write_ceiling;  // io_uring writes from pinned memory
  std::string write_ceiling_name;
};

// GPU-initiated methods: a launch per round of `slots` requests, timed with
// events, verified after, latencies copied back.
figure gpu_rounds(const study& s, std::uint64_t requests, const char* kernel,
                  const std::function<void(std::uint64_t r0, std::uint64_t count)>& launch,
                  const std::function<void()>& check) {
  figure f;
  f.requests = requests;
  gpu_timer timer;
  std::vector<float> all, part;
  all.reserve(requests);
  unsigned rounds = 0;
  runtime::memset_device(s.dst, 0xFF, s.slots * s.request);
  for (std::uint64_t r0 = 0; r0 < requests; r0 += s.slots, ++rounds) {
    const std::uint64_t count = std::min(s.slots, requests - r0);
    const im::cpu_meter cpu;
    timer.start();
    launch(r0, count);
    timer.stop();
    check_launch(kernel);
    f.cpu_seconds += cpu.seconds();
    f.seconds += timer.seconds();
    check();
    f.mismatches += verify_trace(s.dst, s.request, s.tr, r0, count, s.file.seed);
    runtime::memset_device(s.dst, 0xFF, count * s.request);
    part.resize(count);
    runtime::copy_to_host(part.data(), s.latency, count * sizeof(float));
    all.insert(all.end(), part.begin(), part.end());
  }
  f.latency = im::summarize(all);
  f.gbps = gb_per_s(static_cast<double>(requests) * s.request, f.seconds);
  f.iops = per_s(static_cast<double>(requests), f.seconds);
  f.extra.push_back({"rounds", rounds});
  return f;
}

unsigned grid_for(std::uint64_t threads, std::uint64_t block_threads) {
  return static_cast<unsigned>((threads + block_threads - 1) / block_threads);
}

// ---- the methods ------------------------------------------------------------------

figure run_uring(const study& s, const options& opts, unsigned threads) {
  uring_reader_config c;
  c.path = s.file.path;
  c.threads = threads;
  c.queue_depth = opts.uring_depth;
  c.block_bytes = s.request;
  c.requests = s.requests;
  c.trace = s.tr;
  c.direct = direct_mode::off;
  c.file_seed = s.file.seed;
  c.alloc = pinned_alloc;
  c.release = pinned_free;
  c.record_latency = true;
  uring_reader_result u = run_uring_reader(c);
  if (u.errors != 0)
    throw runtime_error("io_uring: " + std::to_string(u.errors) +
                        " reads failed; first: " + u.first_error);
  figure f = from_run(u, im::summarize(u.latency_us), threads);
  f.extra.push_back({"queue_depth", opts.uring_depth});
  f.extra.push_back({"fixed_buffers", u.fixed_buffers});
  return f;
}

im::cpu_method_config cpu_config(const study& s, unsigned threads, std::uint64_t requests) {
  im::cpu_method_config c;
  c.path = s.file.path;
  c.threads = threads;
  c.request_bytes = s.request;
  c.requests = requests;
  c.tr = s.tr;
  c.file_seed = s.file.seed;
  c.slots = s.slots;
  return c;
}

figure run_pread(const study& s, unsigned threads) {
  gpu_destination dst(s.dst, s.slots * s.request, threads,
                      std::max<std::size_t>(s.staging_bytes, s.request));
  figure f = from_cpu(im::run_pread_method(cpu_config(s, threads, s.requests), dst), threads);
  f.extra.push_back({"staging_bytes", static_cast<unsigned long long>(dst.staging_bytes())});
  return f;
}

figure run_mmap(const study& s, unsigned threads) {
  gpu_destination dst(s.dst, s.slots * s.request, threads, s.request);
  return from_cpu(im::run_mmap_method(cpu_config(s, threads, s.slow_requests), dst), threads);
}

// A fresh sparse write target for one write method, discarded after it.
struct scratch_target {
  std::string path;
  scratch_target(std::string p, std::uint64_t bytes) : path(std::move(p)) {
    im::make_write_target(path, bytes);
  }
  ~scratch_target() { im::discard_write_target(path); }
  scratch_target(const scratch_target&) = delete;
  scratch_target& operator=(const scratch_target&) = delete;
};

figure run_uring_write(const study& s, const options& opts, unsigned threads,
                       const std::string& target) {
  const scratch_target t(target, s.file.bytes);
  im::cpu_method_config cfg = cpu_config(s, threads, s.requests);
  cfg.path = t.path;
  auto arena =
      runtime::make_host_mapped<std::byte>(s.slots * s.request);  // pinned, like the read ceiling
  figure f = from_cpu(im::run_uring_write_method(cfg, opts.uring_depth, arena.get()), threads);
  f.extra.push_back({"queue_depth", opts.uring_depth});
  return f;
}

figure run_pwrite(const study& s, unsigned threads, const std::string& target) {
  const scratch_target t(target, s.file.bytes);
  im::cpu_method_config cfg = cpu_config(s, threads, s.requests);
  cfg.path = t.path;
  gpu_source src(s.dst, s.slots * s.request, threads,
                 std::max<std::size_t>(s.staging_bytes, s.request));
  figure f = from_cpu(im::run_pwrite_method(cfg, src), threads);
  f.extra.push_back({"staging_bytes", static_cast<unsigned long long>(src.staging_bytes())});
  return f;
}

figure run_mmap_write(const study& s, unsigned threads, const std::string& target) {
  const scratch_target t(target, s.file.bytes);
  im::cpu_method_config cfg = cpu_config(s, threads, s.slow_requests);
  cfg.path = t.path;
  gpu_source src(s.dst, s.slots * s.request, threads, s.request);
  return from_cpu(im::run_mmap_write_method(cfg, src), threads);
}

// The managed copy of the file, made once and shared by both patterns.
struct managed_file {
  std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  double fill_seconds = 0;
  ~managed_file() {
    if (data) cudaFree(data);
  }
};

std::unique_ptr<managed_file> make_managed_copy(const bench_file& file) {
  auto m = std::make_unique<managed_file>();
  m->bytes = file.bytes;
  void* p = nullptr;
  WARPSTORE_CUDA_TRY(cudaMallocManaged(&p, file.bytes, cudaMemAttachGlobal));
  m->data = static_cast<std::byte*>(p);
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  host.id = 0;
  WARPSTORE_CUDA_TRY(cudaMemAdvise(p, file.bytes, cudaMemAdviseSetPreferredLocation, host));
  // The CPU reads the file into it (first touch on the host), in parallel.
  const stopwatch clock;
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw runtime_error("unified memory: open " + file.path + " failed");
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const std::uint64_t chunk = std::uint64_t{64} << 20;
  std::atomic<std::uint64_t> next{0};
  std::mutex failure_lock;
  std::string failure;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      try {
        for (std::uint64_t off; (off = next.fetch_add(chunk)) < file.bytes;) {
          const std::uint64_t n = std::min(chunk, file.bytes - off);
          if (tools::detail::pread_all(fd, reinterpret_cast<unsigned char*>(m->data + off), n, off,
                                       file.path) != n)
            throw runtime_error("short read at offset " + std::to_string(off));
        }
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> g(failure_lock);
        if (failure.empty()) failure = e.what();
      }
    });
  for (auto& th : pool) th.join();
  ::close(fd);
  if (!failure.empty())
    throw runtime_error("unified memory: filling the managed copy of " + file.path + ": " +
                        failure);
  m->fill_seconds = clock.seconds();
  return m;
}

figure run_uvm(const study& s, const managed_file& m, std::uint64_t threads,
               std::uint64_t block_threads) {
  const std::uint64_t warps =
      std::max<std::uint64_t>(1, threads / std::min<std::uint64_t>(32, block_threads));
  figure f = gpu_rounds(
      s, s.slow_requests, "uvm_kernel",
      [&](std::uint64_t r0, std::uint64_t count) {
        uvm_kernel<<<grid_for(threads, block_threads), static_cast<unsigned>(block_threads)>>>(
            reinterpret_cast<const uint4*>(m.data), s.tr, r0, count, s.request,
            reinterpret_cast<uint4*>(s.dst), s.latency);
      },
      [] {});
  f.threads = threads;
  f.block_threads = block_threads;
  f.extra.push_back({"warps", warps});
  f.extra.push_back({"preferred_location", "host"});
  return f;
}

// How libcufile can run here: GDS needs the nvidia-fs kernel module; without
// it cuFile runs in compatibility mode (POSIX I/O through bounce buffers).
std::string cufile_mode() {
  std::ifstream modules("/proc/modules");
  for (std::string line; std::getline(modules, line);)
    if (line.rfind("nvidia_fs ", 0) == 0) return "nvidia-fs loaded (GDS possible)";
  return "compatibility (nvidia-fs not loaded)";
}

// libcufile loaded and its driver opened once per process (on first use),
// closed when the subcommand ends; a failure to do either is kept and raised
// by every cuFile measurement.
class cufile_session {
 public:
  im::cufile_library& get() {
    if (!tried_) {
      tried_ = true;
      lib_ = im::cufile_library::load(why_);
      if (lib_) try {
          lib_->driver_open();
        } catch (const im::cufile_error& e) {
          why_ = std::string(e.what()) + " (" + lib_->path() + ", " + cufile_mode() + ")";
          lib_.reset();
        }
    }
    if (!lib_) throw runtime_error(why_);
    return *lib_;
  }

 private:
  bool tried_ = false;
  std::unique_ptr<im::cufile_library> lib_;
  std::string why_;
};

// Reads from the file, or (with `write_target`) writes the pattern from GPU
// memory to that sparse target, through cuFile.
figure run_cufile(const study& s, cufile_session& session, unsigned threads,
                  std::vector<std::string>& log, const std::string& write_target = "") {
  const bool writing = !write_target.empty();
  const std::string& path = writing ? write_target : s.file.path;
  im::cufile_library* lib = &session.get();
  // GDS wants O_DIRECT; compatibility mode takes either. Try both, keep every refusal.
  int fd = -1;
  im::cufile_library::handle h = nullptr;
  std::string refusals;
  bool direct = false;
  for (const bool try_direct : {true, false}) {
    const int flags = (writing ? O_WRONLY : O_RDONLY) | O_CLOEXEC | (try_direct ? O_DIRECT : 0);
    const int f = ::open(path.c_str(), flags);
    if (f < 0) {
      refusals += std::string(try_direct ? "O_DIRECT" : "buffered") + " open: errno " +
                  std::to_string(errno) + "; ";
      continue;
    }
    try {
      h = lib->register_file(f);
      fd = f;
      direct = try_direct;
      break;
    } catch (const im::cufile_error& e) {
      refusals += std::string(try_direct ? "O_DIRECT fd: " : "buffered fd: ") + e.what() + "; ";
      ::close(f);
    }
  }
  if (!h) throw runtime_error("cuFile (" + lib->path() + ", " + cufile_mode() + "): " + refusals);
  if (!refusals.empty()) log.push_back("cufile: " + refusals);
  struct closer {
    im::cufile_library& lib;
    im::cufile_library::handle h;
    int fd;
    ~closer() {
      lib.deregister_file(h);
      ::close(fd);
    }
  } close_on_exit{*lib, h, fd};
  bool buffer_registered = true;
  try {
    lib->register_buffer(s.dst, s.slots * s.request);
  } catch (const im::cufile_error& e) {
    buffer_registered = false;
    log.push_back(std::string("cufile: using an unregistered buffer: ") + e.what());
  }
  const std::uint64_t B = s.request;
  im::cpu_method_config cfg = cpu_config(s, threads, s.slow_requests);
  const char* call = writing ? "cuFileWrite" : "cuFileRead";
  const im::thread_body body = [&](unsigned, std::uint64_t base, std::uint64_t first,
                                   std::uint64_t last, std::vector<float>& lat) {
    for (std::uint64_t k = first; k < last; ++k) {
      const std::uint64_t start = im::monotonic_ns();
      const std::uint64_t off = s.tr.index(base + k) * B;
      const ssize_t n =
          writing ? lib->write(h, s.dst, B, static_cast<off_t>(off), static_cast<off_t>(k * B))
                  : lib->read(h, s.dst, B, static_cast<off_t>(off), static_cast<off_t>(k * B));
      if (n != static_cast<ssize_t>(B))
        throw runtime_error(std::string(call) + " of request " + std::to_string(base + k) +
                            " (offset " + std::to_string(off) + ") returned " + std::to_string(n));
      lat.push_back(static_cast<float>(static_cast<double>(im::monotonic_ns() - start) * 1e-3));
    }
  };
  im::method_result r;
  if (writing) {
    cfg.path = write_target;
    gpu_source src(s.dst, s.slots * s.request, threads, s.request);
    r = im::run_rounds(cfg, im::write_hooks(cfg, src), body);
  } else {
    gpu_destination dst(s.dst, s.slots * s.request, threads, s.request);
    r = im::run_rounds(cfg, dst, body);
  }
  if (buffer_registered) lib->deregister_buffer(s.dst);
  figure f = from_cpu(r, threads);
  f.extra.push_back({"o_direct", direct});
  f.extra.push_back({"buffer_registered", buffer_registered});
  f.extra.push_back({"library", lib->path()});
  f.extra.push_back({"mode", cufile_mode()});
  const char* json_path = std::getenv("CUFILE_ENV_PATH_JSON");
  f.extra.push_back(
      {"cufile_json", json_path && *json_path ? json::value(json_path) : json::value()});
  return f;
}

figure run_block(const study& s, const options& base, std::uint64_t threads,
                 std::uint64_t block_threads) {
  options o = base;
  const std::uint32_t piece = std::min<std::uint32_t>(s.request, 65536);
  o.line_size = piece;
  o.validate();
  const std::shared_ptr<controller> ctrl = make_controller(s.file.path, o);
  const io_ref io = ctrl->device_ref();
  auto errors = runtime::make_device<error_record>(1);
  figure f = gpu_rounds(
      s, s.requests, "block_kernel",
      [&](std::uint64_t r0, std::uint64_t count) {
        block_kernel<<<grid_for(threads, block_threads), static_cast<unsigned>(block_threads)>>>(
            io, s.tr, r0, count, s.request, piece, s.dst, s.latency, errors.get());
      },
      [&] {
        ctrl->check();
        error_record e{};
        runtime::copy_to_host(&e, errors.get(), sizeof e);
        if (e.count != 0) throw io_error(e, "iomethods block_kernel (element = request number)");
      });
  f.threads = threads;
  f.block_threads = block_threads;
  f.extra.push_back({"piece_bytes", piece});
  add_controller_params(f.extra, o, *ctrl);
  return f;
}

// The array's cold and hot passes over the same trace with one cache.
struct array_figures {
  figure cold, hot;
};

array_figures run_array_pair(const study& s, const options& base, std::uint64_t threads,
                             std::uint64_t block_threads, bool want_hot) {
  options o = base;
  o.validate();
  const std::shared_ptr<controller> ctrl = make_controller(s.file.path, o);
  auto c = std::make_shared<cache>(o);
  array<uint4> a(c, ctrl, 0, 0, o);
  auto pass = [&](const char* which) {
    const cache_stats before = a.stats();
    figure f = gpu_rounds(
        s, s.requests, "array_kernel",
        [&](std::uint64_t r0, std::uint64_t count) {
          array_kernel<<<grid_for(threads, block_threads), static_cast<unsigned>(block_threads)>>>(
              a.ref(), s.tr, r0, count, s.request, reinterpret_cast<uint4*>(s.dst), s.latency);
        },
        [&] { a.check(); });
    const cache_stats after = a.stats();
    f.threads = threads;
    f.block_threads = block_threads;
    f.extra.push_back({"pass", which});
    f.extra.push_back({"line_size", o.line_size});
    f.extra.push_back({"cache_bytes", static_cast<unsigned long long>(c->bytes())});
    f.extra.push_back({"hits", static_cast<unsigned long long>(after.hits - before.hits)});
    f.extra.push_back({"misses", static_cast<unsigned long long>(after.misses - before.misses)});
    add_controller_params(f.extra, o, *ctrl);
    return f;
  };
  array_figures r;
  r.cold = pass("cold");
  if (want_hot) r.hot = pass("hot");
  return r;
}

// ---- results ------------------------------------------------------------------------

result to_result(const study& s, const std::string& name, const figure& f, bool write = false) {
  const std::optional<figure>& ceiling = write ? s.write_ceiling : s.ceiling;
  json::object p =
      json::object_builder()
          .add("cpu_seconds", f.cpu_seconds)
          .add("p50_us", f.latency.p50_us)
          .add("p99_us", f.latency.p99_us)
          .add("p999_us", f.latency.p999_us)
          .add("max_us", f.latency.max_us)
          .add("latency_samples", static_cast<unsigned long long>(f.latency.samples))
          .add("threads", static_cast<unsigned long long>(f.threads))
          .add("threads_per_block",
               f.block_threads ? json::value(static_cast<unsigned long long>(*f.block_threads))
                               : json::value())
          .add("iops", f.iops)
          .add("requests", static_cast<unsigned long long>(f.requests))
          .add("request_bytes", s.request)
          .add("pattern", access_name(s.tr.kind))
          .add("seed", static_cast<unsigned long long>(s.tr.seed))
          .add("seconds", f.seconds)
          .add("file_bytes", static_cast<unsigned long long>(s.file.bytes))
          .done();
  for (const auto& kv : f.extra) p.push_back(kv);
  if (ceiling) {
    p.push_back({"ceiling_iops", ceiling->iops});
    p.push_back({"ceiling_p50_us", ceiling->latency.p50_us});
    p.push_back({"ceiling_p99_us", ceiling->latency.p99_us});
    p.push_back({"ceiling_cpu_seconds", ceiling->cpu_seconds});
  }
  return result{name,
                f.gbps,
                "GB/s",
                ceiling ? std::optional<double>(ceiling->gbps) : std::nullopt,
                write ? s.write_ceiling_name : s.ceiling_name,
                true,
                f.mismatches,
                std::move(p)};
}

std::vector<std::uint64_t> size_list(const parsed_args& args, const char* option) {
  std::vector<std::uint64_t> v;
  for (const std::string& x : args.list(option)) v.push_back(parse_size(x));
  return v;
}

}  // namespace

void declare_iomethods(command_spec& cmd) {
  declare_file_options(cmd);
  declare_controller_options(cmd);
  declare_options(cmd, {{"line_size", "4K", "array: cache line size"},
                        {"cache_bytes", "4GiB", "array: cache size (holds the trace, for the hot pass)"}});
  cmd.option("seed", "N", "1", "seed of the random trace (the same for every method)")
      .option("methods", "LIST", "uring,pread,mmap,uvm,cufile,block,array",
              "methods to run (uring, the ceiling, always runs)")
      .option("patterns", "LIST", "random4k,sequential128k", "random4k | sequential128k")
      .option("bytes", "BYTES", "1GiB", "bytes per pattern for io_uring, pread, block and array")
      .option("slow-bytes", "BYTES", "128MiB",
              "bytes per pattern for mmap, unified memory and cuFile")
      .option("dst-bytes", "BYTES", "1GiB",
              "device buffer of request slots; more requests go in rounds")
      .option("cpu-threads", "N", "8", "CPU threads of io_uring, pread, mmap and cuFile")
      .option("staging-bytes", "BYTES", "256K", "pread: bytes per staging buffer (two per thread)")
      .option("gpu-threads", "N", "128K", "GPU threads of block, array and unified memory")
      .option("block-threads", "N", "256",
              "threads per block (1 .. 31, or a multiple of 32 up to 1024)")
      .option(
          "sweep-block-threads", "LIST", "1,32,256,1024",
          "random 4 KiB: block and array cold at these threads per block (--gpu-threads in all)")
      .option(
          "sweep-threads", "LIST", "1K,16K,128K,512K",
          "random 4 KiB: block and array cold at these total GPU threads (--block-threads each)")
      .option("sweep-cpu-threads", "LIST", "1,4,16", "random 4 KiB: pread with these CPU threads")
      .option("cufile-label", "NAME", "", "suffix for cuFile result names (a cufile.json variant)")
      .option(
          "write-file", "PATH", "/tmp/warpstore-iomethods-write.dat",
          "write target (made sparse, the data file's size, for each write method; removed after)")
      .flag("no-writes", "reads only");
}

void run_iomethods(const parsed_args& args, report& out) {
  options opts = controller_options(args);
  opts.controller =
      controller_kind::host;  // warpstore's default path: CPU service threads on the file
  // Every method reads the page-cache-resident file; warpstore too unless told otherwise.
  if (!args.given("direct")) opts.direct = direct_io::off;
  validate_usage(opts);
  auto check_block_threads = [](std::uint64_t b) {
    if (b == 0 || b > 1024 || (b > 32 && b % 32 != 0))
      throw usage_error("threads per block must be 1 to 32 or a multiple of 32 up to 1024");
  };
  const std::uint64_t gpu_threads = args.count("gpu-threads");
  const std::uint64_t block_threads = args.count("block-threads");
  check_block_threads(block_threads);
  const std::vector<std::uint64_t> sweep_blocks = size_list(args, "sweep-block-threads");
  const std::vector<std::uint64_t> sweep_threads = size_list(args, "sweep-threads");
  const std::vector<std::uint64_t> sweep_cpu = size_list(args, "sweep-cpu-threads");
  for (auto b : sweep_blocks) check_block_threads(b);
  const auto cpu_threads = static_cast<unsigned>(args.count("cpu-threads"));
  if (gpu_threads == 0 || cpu_threads == 0) throw usage_error("thread counts must be at least 1");
  std::vector<std::string> methods = args.list("methods");
  auto wants = [&](const char* m) {
    return std::find(methods.begin(), methods.end(), m) != methods.end();
  };
  for (const auto& m : methods)
    if (m != "uring" && m != "pread" && m != "mmap" && m != "uvm" && m != "cufile" &&
        m != "block" && m != "array")
      throw usage_error("unknown method '" + m + "'");
  const std::string cufile_label =
      args.str("cufile-label").empty() ? "" : "." + args.str("cufile-label");

  const bench_file file = prepare_file(args, true);  // buffered methods read from the page cache
  const std::uint64_t dst_bytes = args.size("dst-bytes");
  auto dst = runtime::make_device<std::byte>(dst_bytes, false);
  std::unique_ptr<managed_file> managed;
  cufile_session cufile;

  for (const std::string& pattern : args.list("patterns")) {
    study s;
    s.file = file;
    if (pattern == "random4k") {
      s.request = 4096;
    } else if (pattern == "sequential128k") {
      s.request = 128 << 10;
    } else {
      throw usage_error("unknown pattern '" + pattern + "' (random4k | sequential128k)");
    }
    s.tag = pattern;
    const std::uint64_t blocks = file.bytes / s.request;
    s.tr = pattern == "random4k"
               ? trace::uniform(static_cast<std::uint64_t>(args.integer("seed")), blocks)
               : trace::sequential(blocks);
    s.requests = std::max<std::uint64_t>(1, args.size("bytes") / s.request);
    s.slow_requests = std::max<std::uint64_t>(1, args.size("slow-bytes") / s.request);
    s.slots = std::min(s.requests, dst_bytes / s.request);
    if (s.slots == 0) throw usage_error("--dst-bytes holds no request");
    s.dst = dst.get();
    auto latency = runtime::make_device<float>(s.slots, false);
    s.latency = latency.get();
    s.cpu_threads = cpu_threads;
    s.staging_bytes = args.size("staging-bytes");
    const std::string base = "iomethods.";
    const std::string suffix = "." + pattern + ".read";

    // One measurement under its full name. A method that could not run gives
    // no result (a result is a checked figure); its error is printed as a note.
    auto measure = [&](const std::string& name, const std::function<figure()>& fn,
                       bool write = false) {
      std::fprintf(stderr, "iomethods: %s ...\n", name.c_str());
      try {
        out.results.push_back(to_result(s, name, fn(), write));
      } catch (const usage_error&) {
        throw;
      } catch (const std::exception& e) {
        out.notes.push_back("FAILED " + name + ": " + e.what());
      }
    };
    auto named = [&](const std::string& method, const std::string& tail = "") {
      return base + method + suffix + tail;
    };
    const bool sweep = pattern == "random4k";

    // The ceiling first: every other result is a ratio of it.
    {
      const figure c = run_uring(s, opts, cpu_threads);
      s.ceiling = c;
      s.ceiling_name = "io_uring " + pattern + " reads into pinned memory, " +
                       std::to_string(cpu_threads) + " threads, QD " +
                       std::to_string(opts.uring_depth) + ", page cache, same trace";
      out.results.push_back(to_result(s, named("uring"), c));
    }
    if (wants("pread")) {
      measure(named("pread"), [&] { return run_pread(s, cpu_threads); });
      if (sweep)
        for (const auto t : sweep_cpu)
          measure(named("pread", ".cpu" + std::to_string(t)),
                  [&] { return run_pread(s, static_cast<unsigned>(t)); });
    }
    if (wants("mmap")) measure(named("mmap"), [&] { return run_mmap(s, cpu_threads); });
    if (wants("uvm")) {
      if (!managed) {
        try {
          managed = make_managed_copy(file);
          out.notes.push_back("uvm: managed copy of the file filled by the CPU in " +
                              std::to_string(managed->fill_seconds) + " s");
        } catch (const std::exception& e) {
          out.notes.push_back("FAILED " + named("uvm") + " (setup): " + e.what());
        }
      }
      if (managed)
        measure(named("uvm"), [&] { return run_uvm(s, *managed, gpu_threads, block_threads); });
    }
    if (wants("cufile"))
      measure(named("cufile" + cufile_label), [&] {
        std::vector<std::string> log;
        figure f = run_cufile(s, cufile, cpu_threads, log);
        for (auto& l : log) out.notes.push_back(l);
        return f;
      });
    if (wants("block")) {
      measure(named("block"), [&] { return run_block(s, opts, gpu_threads, block_threads); });
      if (sweep) {
        for (const auto b : sweep_blocks)
          measure(named("block", ".tpb" + std::to_string(b)),
                  [&] { return run_block(s, opts, gpu_threads, b); });
        for (const auto t : sweep_threads)
          measure(named("block", ".threads" + size_tag(t)),
                  [&] { return run_block(s, opts, t, block_threads); });
      }
    }
    if (wants("array")) {
      // Cold and hot share one cache: the hot pass reads the trace the cold one brought in.
      std::optional<array_figures> pair;
      measure(named("array_cold"), [&] {
        pair = run_array_pair(s, opts, gpu_threads, block_threads, true);
        return pair->cold;
      });
      if (pair) measure(named("array_hot"), [&] { return pair->hot; });
      if (sweep) {
        for (const auto b : sweep_blocks)
          measure(named("array_cold", ".tpb" + std::to_string(b)),
                  [&] { return run_array_pair(s, opts, gpu_threads, b, false).cold; });
        for (const auto t : sweep_threads)
          measure(named("array_cold", ".threads" + size_tag(t)),
                  [&] { return run_array_pair(s, opts, t, block_threads, false).cold; });
      }
    }

    // Writes, for the methods that can write (warpstore writes are not built yet):
    // the pattern bytes of each request go to a fresh sparse target, read back after each round.
    if (!args.flag("no-writes")) {
      const std::string write_file = args.str("write-file");
      auto named_write = [&](const std::string& method) {
        return base + method + "." + pattern + ".write";
      };
      measure(
          named_write("uring"),
          [&] {
            figure c = run_uring_write(s, opts, cpu_threads, write_file);
            s.write_ceiling = c;
            s.write_ceiling_name = "io_uring " + pattern + " buffered writes from pinned memory, " +
                                   std::to_string(cpu_threads) + " threads, QD " +
                                   std::to_string(opts.uring_depth) + ", same trace";
            return c;
          },
          true);
      if (wants("pread"))
        measure(
            named_write("pwrite"), [&] { return run_pwrite(s, cpu_threads, write_file); }, true);
      if (wants("mmap"))
        measure(
            named_write("mmap"), [&] { return run_mmap_write(s, cpu_threads, write_file); }, true);
      if (wants("cufile"))
        measure(
            named_write("cufile" + cufile_label),
            [&] {
              std::vector<std::string> log;
              figure f = run_cufile(s, cufile, cpu_threads, log, write_file);
              for (auto& l : log) out.notes.push_back(l);
              return f;
            },
            true);
    }
  }
}

}  // namespace warpstore::bench
