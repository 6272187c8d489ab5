// warpstore-bench checkpoint: checkpoint throughput of GPU buffers through a
// warpstore checkpoint group (host controller; the checkpoint runs as a
// kernel: every warp writes its share through the NVMe queues, the last one
// commits with FLUSH, record, FLUSH) against what a user does today: for each
// buffer cudaMemcpy to pinned host memory and pwrite (several threads), then
// fdatasync. Both timed to durable, same buffers, same run. Every byte is
// verified: warpstore by restoring into zeroed buffers, the baseline by
// reading its file back, both compared on the GPU with the fill pattern.
//
// Result checkpoint.vs_memcpy_pwrite (study durability): GB/s of warpstore,
// ceiling = GB/s of the baseline.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/subcommands.h"
#include "support/setting_options.h"
#include "support/gpu.cuh"
#include "support/pattern.cuh"
#include "support/pattern_file.h"
#include "support/timing.h"
#include "warpstore/cuda_check.h"
#include "warpstore/durable/checkpoint.cuh"

namespace warpstore::bench {

namespace {

constexpr unsigned block_threads = 256;

// Word i of buffer b for round `seed`.
__host__ __device__ std::uint64_t fill_word(std::uint32_t b, std::uint64_t i, std::uint64_t seed) {
  return tools::pattern_word((std::uint64_t{b} << 40) + i * 8, seed);
}

__global__ void fill_kernel(std::uint64_t* p, std::uint64_t words, std::uint32_t b, std::uint64_t seed) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < words;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    p[i] = fill_word(b, i, seed);
}

__global__ void check_kernel(const std::uint64_t* p, std::uint64_t words, std::uint32_t b,
                             std::uint64_t seed, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < words;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    mine += p[i] != fill_word(b, i, seed);
  if (mine) atomicAdd(bad, mine);
}

struct gpu_buffers {
  std::vector<runtime::device_ptr<std::uint64_t>> mem;
  std::uint64_t words = 0;
  unsigned grid = 0;

  gpu_buffers(std::uint32_t count, std::uint64_t bytes_each) : words(bytes_each / 8) {
    for (std::uint32_t b = 0; b < count; ++b) mem.push_back(runtime::make_device<std::uint64_t>(words, false));
    grid = resident_blocks(fill_kernel, block_threads);
  }
  void fill(std::uint64_t seed) {
    for (std::uint32_t b = 0; b < mem.size(); ++b)
      fill_kernel<<<grid, block_threads>>>(mem[b].get(), words, b, seed);
    check_launch("fill_kernel");
  }
  void zero() {
    for (auto& m : mem) runtime::memset_device(m.get(), 0, words * 8);
  }
  std::uint64_t check(const std::uint64_t* p, std::uint32_t b, std::uint64_t seed) const {
    auto bad = runtime::make_device<unsigned long long>(1);
    check_kernel<<<grid, block_threads>>>(p, words, b, seed, bad.get());
    check_launch("check_kernel");
    unsigned long long h = 0;
    runtime::copy_to_host(&h, bad.get(), sizeof h);
    return h;
  }
  std::uint64_t check_all(std::uint64_t seed) const {
    std::uint64_t bad = 0;
    for (std::uint32_t b = 0; b < mem.size(); ++b) bad += check(mem[b].get(), b, seed);
    return bad;
  }
};

// pwrite or pread of [offset, offset + bytes) of `path` with `threads`
// threads, one contiguous piece each.
void parallel_io(bool write, int fd, const std::string& path, std::byte* buf, std::uint64_t offset,
                 std::uint64_t bytes, unsigned threads) {
  const std::uint64_t per = std::max<std::uint64_t>(4096, (bytes / threads + 4095) / 4096 * 4096);
  tools::detail::parallel_chunks(bytes, per, threads, {}, [&](std::uint64_t at, std::uint64_t n) {
    auto* p = reinterpret_cast<unsigned char*>(buf + at);
    if (write)
      tools::detail::pwrite_all(fd, p, n, offset + at, path);
    else if (tools::detail::pread_all(fd, p, n, offset + at, path) != n)
      throw std::runtime_error(path + " is shorter than the checkpoint");
  });
}

}  // namespace

void declare_checkpoint(command_spec& cmd) {
  declare_controller_options(cmd);
  declare_options(cmd, {{"line_size", "64K", "largest command (the checkpoint's chunk)"}});
  cmd.option("bytes", "BYTES", "2GiB", "GPU bytes checkpointed (split over --buffers)")
      .option("buffers", "N", "4", "device buffers in the group")
      .option("repeat", "N", "3", "checkpoints timed (each side)")
      .option("file", "PATH", "/tmp/warpstore-checkpoint.ckpt", "warpstore's checkpoint file")
      .option("baseline-file", "PATH", "/tmp/warpstore-checkpoint.pwrite", "the baseline's file")
      .option("io-threads", "N", "8", "baseline: pwrite threads")
      .option("name", "NAME", "checkpoint.vs_memcpy_pwrite", "result name");
}

void run_checkpoint(const parsed_args& args, report& out) {
  const std::uint32_t count = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, args.count("buffers")));
  const std::uint64_t each = args.size("bytes") / count / 4096 * 4096;
  if (each == 0) throw usage_error("--bytes must give every buffer at least 4 KiB");
  const std::uint64_t total = each * count;
  const unsigned repeat = static_cast<unsigned>(std::max<std::int64_t>(1, args.integer("repeat")));
  const unsigned io_threads = static_cast<unsigned>(std::max<std::int64_t>(1, args.integer("io-threads")));
  options opts = controller_options(args);
  opts.writable = true;

  gpu_buffers bufs(count, each);

  // warpstore: the file is created (zeros) outside the timing; one
  // checkpoint warms the queues and the page cache's allocation.
  const std::string path = args.str("file");
  ::unlink(path.c_str());
  double ws_secs = 0;
  std::uint64_t ws_bad = 0, last_seq = 0, ws_seed = 0;
  std::string controller_name;
  json::object ctl_params;
  {
    checkpoint_group g;
    for (std::uint32_t b = 0; b < count; ++b) g.add(bufs.mem[b].get(), each, "buffer " + std::to_string(b));
    stopwatch open_clock;
    g.open(path, opts);
    std::printf("checkpoint file %s: %.1f GiB sized in %.2f s\n", path.c_str(),
                static_cast<double>(g.layout().file_bytes) / (1ull << 30), open_clock.seconds());
    controller_name = g.shared_controller()->name();
    add_controller_params(ctl_params, opts, *g.shared_controller());
    bufs.fill(100);
    g.checkpoint();
    for (unsigned r = 0; r < repeat; ++r) {
      ws_seed = 101 + r;
      bufs.fill(ws_seed);
      runtime::synchronize();
      stopwatch clock;
      last_seq = g.checkpoint();  // a kernel; returns once FLUSH made the record durable
      const double s = clock.seconds();
      ws_secs += s;
      std::printf("warpstore checkpoint %llu: %.3f s, %.2f GB/s\n", static_cast<unsigned long long>(last_seq), s,
                  gb_per_s(static_cast<double>(total), s));
    }
    bufs.zero();
    const restore_result rr = g.restore();
    if (!rr.restored() || rr.sequence != last_seq)
      throw std::runtime_error("warpstore restore found checkpoint " + std::to_string(rr.sequence) +
                               ", wanted " + std::to_string(last_seq));
    ws_bad = bufs.check_all(ws_seed);
  }

  // Baseline: cudaMemcpy each buffer to pinned memory, pwrite it, fdatasync.
  const std::string base_path = args.str("baseline-file");
  const int fd = ::open(base_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + base_path + ": " + std::strerror(errno));
  std::byte* pinned = nullptr;
  WARPSTORE_CUDA_TRY(cudaMallocHost(&pinned, total));
  double base_secs = 0;
  std::uint64_t base_bad = 0, base_seed = 0;
  try {
    // Allocate the file's blocks first, as warpstore's are.
    std::memset(pinned, 0, total);
    parallel_io(true, fd, base_path, pinned, 0, total, io_threads);
    if (::fdatasync(fd) != 0) throw std::runtime_error("fdatasync: " + std::string(std::strerror(errno)));
    for (unsigned r = 0; r < repeat; ++r) {
      base_seed = 201 + r;
      bufs.fill(base_seed);
      runtime::synchronize();
      stopwatch clock;
      for (std::uint32_t b = 0; b < count; ++b) {
        WARPSTORE_CUDA_TRY(cudaMemcpy(pinned + b * each, bufs.mem[b].get(), each, cudaMemcpyDeviceToHost));
        parallel_io(true, fd, base_path, pinned + b * each, b * each, each, io_threads);
      }
      if (::fdatasync(fd) != 0) throw std::runtime_error("fdatasync: " + std::string(std::strerror(errno)));
      const double s = clock.seconds();
      base_secs += s;
      std::printf("cudaMemcpy + pwrite + fdatasync: %.3f s, %.2f GB/s\n", s, gb_per_s(static_cast<double>(total), s));
    }
    // Read the file back and compare on the GPU.
    std::memset(pinned, 0, total);
    parallel_io(false, fd, base_path, pinned, 0, total, io_threads);
    for (std::uint32_t b = 0; b < count; ++b) {
      runtime::copy_to_device(bufs.mem[b].get(), pinned + b * each, each);
      base_bad += bufs.check(bufs.mem[b].get(), b, base_seed);
    }
  } catch (...) {
    cudaFreeHost(pinned);
    ::close(fd);
    throw;
  }
  cudaFreeHost(pinned);
  ::close(fd);
  ::unlink(base_path.c_str());

  const double bytes = static_cast<double>(total) * repeat;
  result r;
  r.name = args.str("name");
  r.value = gb_per_s(bytes, ws_secs);
  r.unit = "GB/s";
  r.ceiling = gb_per_s(bytes, base_secs);
  r.ceiling_name = "cudaMemcpy to pinned + pwrite (" + std::to_string(io_threads) +
                   " threads) per buffer, then fdatasync";
  r.verified = true;
  r.mismatches = ws_bad + base_bad;
  json::object_builder pb;
  pb.add("bytes", static_cast<unsigned long long>(total))
      .add("buffers", count)
      .add("repeat", repeat)
      .add("line_size", opts.line_size)
      .add("controller", controller_name)
      .add("warpstore_seconds", ws_secs / repeat)
      .add("baseline_seconds", base_secs / repeat)
      .add("warpstore_mismatches", static_cast<unsigned long long>(ws_bad))
      .add("baseline_mismatches", static_cast<unsigned long long>(base_bad));
  r.params = pb.done();
  for (auto& kv : ctl_params) r.params.push_back(kv);
  out.results.push_back(r);
  std::ostringstream note;
  note << count << " device buffers, " << format_size(total) << " in all, " << repeat
       << " checkpoints each side, timed to durable (FLUSH / fdatasync). warpstore "
       << ws_secs / repeat << " s each, baseline " << base_secs / repeat
       << " s each. Verified: warpstore by restoring into zeroed buffers, the baseline by reading "
          "its file back.";
  out.notes.push_back(note.str());
}

}  // namespace warpstore::bench
