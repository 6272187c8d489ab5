#include "bench/ceilings/uring_reader.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "bench/iomethods/measure.h"
#include "support/args.h"
#include "support/pattern_file.h"
#include "support/timing.h"

namespace warpstore::bench {

direct_mode parse_direct_mode(const std::string& s) {
  if (s == "off") return direct_mode::off;
  if (s == "auto") return direct_mode::automatic;
  if (s == "on") return direct_mode::on;
  throw usage_error("direct I/O mode '" + s + "' is not one of off|auto|on");
}

const char* to_string(direct_mode m) {
  switch (m) {
    case direct_mode::off: return "off";
    case direct_mode::automatic: return "auto";
    default: return "on";
  }
}

namespace {

[[noreturn]] void fail_errno(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

// Opens `path` read-only, with O_DIRECT when the mode asks for it and the
// file system takes it (a probe read of one block decides).
int open_for_reading(const std::string& path, direct_mode mode, std::uint32_t block_bytes,
                     bool& direct) {
  direct = false;
  if (mode != direct_mode::off) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      void* probe = nullptr;
      if (::posix_memalign(&probe, 4096, block_bytes) != 0) {
        ::close(fd);
        throw std::bad_alloc();
      }
      const ssize_t n = ::pread(fd, probe, block_bytes, 0);
      err = n < 0 ? errno : 0;
      std::free(probe);
      if (n >= 0) {
        direct = true;
        return fd;
      }
      ::close(fd);
    }
    if (mode == direct_mode::on)
      fail_errno(err, "O_DIRECT read of " + path + " with " + std::to_string(block_bytes) +
                          "-byte blocks");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(errno, "open " + path);
  return fd;
}

// io_uring_register_buffers takes at most 1 GiB per iovec; chunks hold whole slots.
std::uint64_t chunk_bytes_for(std::uint32_t block_bytes) {
  return (std::uint64_t{1} << 30) / block_bytes * block_bytes;
}

struct worker_state {
  io_uring ring{};
  bool ring_ready = false;
  std::uint64_t mismatches = 0;
  std::uint64_t errors = 0;
  std::string first_error;
  std::vector<float> latency_us;
};

}  // namespace

uring_reader_result run_uring_reader(const uring_reader_config& cfg) {
  if (cfg.threads == 0) throw std::invalid_argument("uring_reader: threads must be at least 1");
  if (cfg.queue_depth == 0 || cfg.queue_depth > 32768)
    throw std::invalid_argument("uring_reader: queue depth must be 1 to 32768");
  if (cfg.block_bytes == 0 || cfg.block_bytes % 512 != 0)
    throw std::invalid_argument("uring_reader: block size must be a positive multiple of 512");
  if (cfg.trace.blocks == 0) throw std::invalid_argument("uring_reader: the trace has no blocks");
  if (cfg.trace.kind == access::indexed && cfg.trace.indices == nullptr)
    throw std::invalid_argument("uring_reader: indexed trace without indices");

  uring_reader_result res;
  res.requests = cfg.requests;
  res.bytes = cfg.requests * cfg.block_bytes;
  if (cfg.requests == 0) return res;

  bool direct = false;
  const int fd = open_for_reading(cfg.path, cfg.direct, cfg.block_bytes, direct);
  tools::detail::fd_guard fd_guard(fd);
  res.direct = direct;
  {
    const off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) fail_errno(errno, "lseek " + cfg.path);
    if (cfg.trace.blocks > static_cast<std::uint64_t>(end) / cfg.block_bytes)
      throw std::invalid_argument("uring_reader: the trace spans " + std::to_string(cfg.trace.blocks) +
                                  " blocks but " + cfg.path + " holds " +
                                  std::to_string(static_cast<std::uint64_t>(end) / cfg.block_bytes));
  }

  // Destination arena: one slot per request of a round.
  const std::uint64_t B = cfg.block_bytes;
  const std::uint64_t slots = std::min<std::uint64_t>(
      cfg.requests, std::max<std::uint64_t>(cfg.threads, cfg.arena_bytes / B));
  const std::size_t arena_bytes = (slots * B + 4095) / 4096 * 4096;
  std::byte* arena = nullptr;
  std::function<void(void*)> release;
  if (cfg.alloc) {
    arena = static_cast<std::byte*>(cfg.alloc(arena_bytes));
    release = cfg.release;
  } else {
    arena = static_cast<std::byte*>(std::aligned_alloc(4096, arena_bytes));
    if (!arena) throw std::bad_alloc();
    release = [](void* p) { std::free(p); };
  }
  std::unique_ptr<std::byte, std::function<void(void*)>> arena_guard(
      arena, [release](void* p) { if (release) release(p); });
  if (reinterpret_cast<std::uintptr_t>(arena) % 4096 != 0)
    throw std::runtime_error("uring_reader: the allocator returned memory not 4096-aligned");

  // One ring per thread, all set up before any thread starts.
  std::vector<worker_state> workers(cfg.threads);
  auto teardown = [&] {
    for (auto& w : workers)
      if (w.ring_ready) {
        io_uring_queue_exit(&w.ring);
        w.ring_ready = false;
      }
  };
  struct teardown_guard {
    std::function<void()> f;
    ~teardown_guard() { f(); }
  } teardown_on_exit{teardown};

  const std::uint64_t chunk = chunk_bytes_for(cfg.block_bytes);
  std::vector<iovec> iovs;
  for (std::uint64_t off = 0; off < slots * B; off += chunk)
    iovs.push_back({arena + off, static_cast<std::size_t>(std::min(chunk, slots * B - off))});

  bool fixed = cfg.fixed_buffers;
  bool fixed_file = true;
  for (auto& w : workers) {
    if (const int err = io_uring_queue_init(cfg.queue_depth, &w.ring, 0); err < 0)
      fail_errno(-err, "io_uring_queue_init (depth " + std::to_string(cfg.queue_depth) + ")");
    w.ring_ready = true;
    if (io_uring_register_files(&w.ring, &fd, 1) < 0) fixed_file = false;
    if (fixed && io_uring_register_buffers(&w.ring, iovs.data(), static_cast<unsigned>(iovs.size())) < 0)
      fixed = false;  // e.g. RLIMIT_MEMLOCK too small: plain READ instead
  }
  if (!fixed && cfg.fixed_buffers)
    for (auto& w : workers) io_uring_unregister_buffers(&w.ring);  // some rings may hold them
  res.fixed_buffers = fixed;

  // Rounds: threads read one slot per request, then verify with the clock stopped.
  std::uint64_t round_base = 0, round_count = 0;
  const unsigned rounds = static_cast<unsigned>((cfg.requests + slots - 1) / slots);
  res.rounds = rounds;
  std::barrier sync(static_cast<std::ptrdiff_t>(cfg.threads) + 1);
  // Submission time of the read in each slot, for its latency.
  std::vector<std::uint64_t> submitted(cfg.record_latency ? slots : 0);

  auto read_range = [&](worker_state& w, std::uint64_t first, std::uint64_t last) {
    io_uring* ring = &w.ring;
    std::uint64_t next = first, inflight = 0, done = 0;
    const std::uint64_t count = last - first;
    auto record = [&](const std::string& what) {
      if (w.errors++ == 0) w.first_error = what;
    };
    while (done < count) {
      while (inflight < cfg.queue_depth && next < last) {
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (!sqe) break;
        const std::uint64_t i = round_base + next;
        const std::uint64_t offset = cfg.trace.index(i) * B;
        std::byte* dst = arena + next * B;
        const int file = fixed_file ? 0 : fd;
        if (fixed)
          io_uring_prep_read_fixed(sqe, file, dst, static_cast<unsigned>(B), offset,
                                   static_cast<int>((next * B) / chunk));
        else
          io_uring_prep_read(sqe, file, dst, static_cast<unsigned>(B), offset);
        if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, next);
        if (cfg.record_latency) submitted[next] = iomethods::monotonic_ns();
        ++next;
        ++inflight;
      }
      const int ret = io_uring_submit_and_wait(ring, 1);
      if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        record(std::string("io_uring_submit_and_wait: ") + std::strerror(-ret));
        // Reap what is still in flight (bounded) before the slots are reused.
        __kernel_timespec ts{1, 0};
        while (inflight > 0) {
          io_uring_cqe* cqe = nullptr;
          if (io_uring_wait_cqe_timeout(ring, &cqe, &ts) < 0) break;
          io_uring_cqe_seen(ring, cqe);
          --inflight;
        }
        w.errors += count - done - 1;
        return;
      }
      unsigned head = 0, seen = 0;
      io_uring_cqe* cqe = nullptr;
      const std::uint64_t reaped_ns = cfg.record_latency ? iomethods::monotonic_ns() : 0;
      io_uring_for_each_cqe(ring, head, cqe) {
        ++seen;
        if (cfg.record_latency)
          w.latency_us.push_back(static_cast<float>(
              static_cast<double>(reaped_ns - submitted[io_uring_cqe_get_data64(cqe)]) * 1e-3));
        if (cqe->res != static_cast<int>(B)) {
          const std::uint64_t k = io_uring_cqe_get_data64(cqe);
          record(cqe->res < 0 ? "read of block " + std::to_string(cfg.trace.index(round_base + k)) +
                                    ": " + std::strerror(-cqe->res)
                              : "short read of block " +
                                    std::to_string(cfg.trace.index(round_base + k)) + ": " +
                                    std::to_string(cqe->res) + " bytes");
        }
      }
      io_uring_cq_advance(ring, seen);
      inflight -= seen;
      done += seen;
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(cfg.threads);
  for (unsigned t = 0; t < cfg.threads; ++t) {
    pool.emplace_back([&, t] {
      worker_state& w = workers[t];
      for (unsigned r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();  // round set up
        const std::uint64_t first = round_count * t / cfg.threads;
        const std::uint64_t last = round_count * (t + 1) / cfg.threads;
        read_range(w, first, last);
        sync.arrive_and_wait();  // all reads of the round done: clock stops
        if (cfg.verify)
          for (std::uint64_t k = first; k < last; ++k)
            w.mismatches += tools::count_mismatches(arena + k * B, cfg.trace.index(round_base + k) * B,
                                                    B, cfg.file_seed);
        sync.arrive_and_wait();  // verified: slots may be reused
      }
    });
  }
  for (unsigned r = 0; r < rounds; ++r) {
    round_base = static_cast<std::uint64_t>(r) * slots;
    round_count = std::min(slots, cfg.requests - round_base);
    const iomethods::cpu_meter cpu;
    sync.arrive_and_wait();
    const stopwatch clock;
    sync.arrive_and_wait();
    res.seconds += clock.seconds();
    res.cpu_seconds += cpu.seconds();
    sync.arrive_and_wait();
  }
  for (auto& th : pool) th.join();

  for (const auto& w : workers) {
    res.mismatches += w.mismatches;
    if (w.errors && res.errors == 0) res.first_error = w.first_error;
    res.errors += w.errors;
    res.latency_us.insert(res.latency_us.end(), w.latency_us.begin(), w.latency_us.end());
  }
  res.verified = cfg.verify;
  res.iops = per_s(static_cast<double>(res.requests), res.seconds);
  res.gbps = gb_per_s(static_cast<double>(res.bytes), res.seconds);
  return res;
}

}  // namespace warpstore::bench
